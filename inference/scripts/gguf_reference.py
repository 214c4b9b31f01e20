"""Writes inference/tests/fixtures/gguf_dequant.json: reference values that the `gguf` Python
package (llama.cpp's own reader, `gguf.quants.dequantize`) computes for the first 512 values
(two super-blocks of the K types) of one tensor of each block type in the pinned Qwen2.5 GGUF. `inference/tests/gguf.rs` checks that
our dequantisers give the same numbers.

The fixture is committed; this script only regenerates it. It needs the models installed
(.ci/models) and, in the torch venv, `pip install gguf==0.19.0 numpy==2.4.6`:

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
OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/gguf_dequant.json"


def main() -> None:
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
    OUT.write_text(json.dumps({"model_sha256_prefix": "1d961463", "rows": rows}) + "\n")
    print(f"wrote {OUT}: " + ", ".join(f"{r['tensor']} ({r['type']})" for r in rows))


if __name__ == "__main__":
    main()
