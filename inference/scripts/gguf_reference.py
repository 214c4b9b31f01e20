"""Writes the GGUF fixtures of inference/tests/gguf.rs from the pinned Qwen2.5 GGUF:

- gguf_dequant.json: reference values that the `gguf` Python package (llama.cpp's own reader, `gguf.quants.dequantize`) computes for the first 512 values
(two super-blocks of the K types) of one tensor of each block type in the pinned Qwen2.5 GGUF. `inference/tests/gguf.rs` checks that
our dequantisers give the same numbers.

The fixture is committed; this script only regenerates it. It needs the models installed
(.ci/models) and, in the torch venv,
`pip install gguf==0.19.0 numpy==2.4.6 transformers==5.24.0`:

    python inference/scripts/gguf_reference.py
"""

import json
import os
import pathlib

import gguf
import numpy as np

MODEL = (
    pathlib.Path(os.environ.get("ENGRAM_CACHE", pathlib.Path.home() / ".cache/engram"))
    / "models/qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf"
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
    dequantised()
    tokens()
