"""Writes the GGUF fixtures of inference/tests/gguf.rs from the pinned Qwen2.5 GGUF:

- gguf_dequant.json: reference values that the `gguf` Python package (llama.cpp's own reader, `gguf.quants.dequantize`) computes for the first 512 values
(two super-blocks of the K types) of one tensor of each block type in the pinned Qwen2.5 GGUF. `inference/tests/gguf.rs` checks that
our dequantisers give the same numbers.

The fixture is committed; this script only regenerates it. It needs the models installed
(.ci/models) and, in the torch venv,
`pip install gguf==0.19.0 numpy==2.4.6 transformers==5.24.0 accelerate==1.15.0`:

    python inference/scripts/gguf_reference.py

With `ENGRAM_REFERENCE_MODEL=qwen2.5-coder-1.5b-instruct` it writes only the logits of that
model (the default generative model, installed by `.ci/models`) into
`qwen2_<name>_logits.json`, for `inference/tests/qwen2.rs`.
"""

import json
import os
import pathlib

import gguf
import numpy as np

REFERENCE = os.environ.get("ENGRAM_REFERENCE_MODEL")
MODEL = (
    pathlib.Path(os.environ.get("ENGRAM_CACHE", pathlib.Path.home() / ".cache/engram"))
    / f"models/{REFERENCE or 'qwen2.5-coder-0.5b-instruct'}/model-q4_k_m.gguf"
)
VALUES = 512
FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures"
TEXTS = [
    "I prefer line charts for weekly revenue.",
    "请按华东区汇总上个月的订单量",
    "GMV excludes refunds: filter price > 0.",
    "我的快递还没有送到，我要投诉！",
    "  Two  spaces,\ttabs\nand new lines\r\n",
    "SELECT region, SUM(amount) FROM orders WHERE dt >= '2024-01-01' GROUP BY 1;",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n",
    "Émigré café naïve 東京 123456 3.14159 e=mc²",
]


def tokens() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(MODEL.parent), gguf_file=MODEL.name)
    cases = [
        {"text": t, "ids": tokenizer.encode(t, add_special_tokens=False)} for t in TEXTS
    ]
    out = FIXTURES / "qwen_tokens.json"
    out.write_text(json.dumps({"cases": cases}, ensure_ascii=False, indent=0) + "\n")
    print(f"wrote {out}: {len(cases)} texts")


PROMPTS = [
    "请按华东区汇总上个月的订单量",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "Which metric did we agree on for churn?<|im_end|>\n<|im_start|>assistant\n",
    "用户说：我更喜欢折线图。Summarise the preference in JSON: {\"topic\": \"",
]
NEW_TOKENS = 24
CHATS = [
    ("You extract what the user prefers.", "我更喜欢看折线图，不要饼图。"),
    ("You are a helpful assistant.", "Which is larger, 9.11 or 9.9? Answer in one sentence."),
]
FIXED = [7, 220, 1000, 13, 9370, 30000, 60000, 90000, 104000, 120000, 140000, 151000, 151643,
         151645, 25, 4913]


def logits() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(MODEL.parent), gguf_file=MODEL.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(MODEL.parent), gguf_file=MODEL.name, dtype=torch.float32
    )
    model.eval()
    cases = []
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        with torch.no_grad():
            out = model(torch.tensor([ids])).logits[0]
        positions = []
        for row in out:
            top = torch.topk(row, 16).indices.tolist()
            picked = top + FIXED
            positions.append(
                {"top1": top[0], "ids": picked, "logits": [float(row[i]) for i in picked]}
            )
        cases.append({"ids": ids, "positions": positions})
    name = f"qwen2_{REFERENCE.split('-')[2]}_logits.json" if REFERENCE else "qwen2_logits.json"
    out_path = FIXTURES / name
    out_path.write_text(json.dumps({"cases": cases}) + "\n")
    print(f"wrote {out_path}: {len(cases)} prompts")
    if REFERENCE:
        return

    chats = []
    for system, user in CHATS:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False)
        with torch.no_grad():
            answer = model.generate(
                torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False
            )[0][len(ids):]
        chats.append(
            {"system": system, "user": user, "text": text, "answer": answer.tolist()}
        )
    out_path = FIXTURES / "qwen2_chat.json"
    out_path.write_text(json.dumps({"chats": chats}, ensure_ascii=False) + "\n")
    print(f"wrote {out_path}: {len(chats)} chats")


def dequantised() -> None:
    reader = gguf.GGUFReader(MODEL)
    picked = {}
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        if kind not in picked:
            picked[kind] = tensor
    rows = []
    for kind, tensor in sorted(picked.items()):
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(-1)[:VALUES]
        rows.append(
            {
                "tensor": tensor.name,
                "type": kind,
                "values": [float(v) for v in values.astype(np.float32)],
            }
        )
    out = FIXTURES / "gguf_dequant.json"
    out.write_text(json.dumps({"model_sha256_prefix": "1d961463", "rows": rows}) + "\n")
    print(f"wrote {out}: " + ", ".join(f"{r['tensor']} ({r['type']})" for r in rows))


if __name__ == "__main__":
    if not REFERENCE:
        dequantised()
        tokens()
    logits()
