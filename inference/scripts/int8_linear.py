"""The int8 lever of the encoder, measured on the torch wheel that tch links (2.13.0): the
medians of an fp32 matmul, of `torch._int_mm` (int8 x int8 -> int32), and of fbgemm's
dynamically quantised linear layer (`quantize_dynamic`, per-tensor int8 weights), at the
shapes of multilingual-e5-small's linear layers for a batch of 32 texts of 40 tokens, with
2 threads:

    ~/.cache/engram/venv/bin/python inference/scripts/int8_linear.py
"""

import time

import torch

torch.set_num_threads(2)


def median_ms(f, n=30):
    for _ in range(3):
        f()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e3


for m, k, n in [(1280, 384, 1536), (1280, 1536, 384), (1280, 384, 384)]:
    x = torch.randn(m, k)
    w = torch.randn(n, k)
    xi = torch.randint(-127, 127, (m, k), dtype=torch.int8)
    wi = torch.randint(-127, 127, (k, n), dtype=torch.int8)
    linear = torch.nn.Linear(k, n)
    linear.weight.data = w
    quantised = torch.ao.quantization.quantize_dynamic(
        torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8
    )
    fp32 = median_ms(lambda: x @ w.t())
    int_mm = median_ms(lambda: torch._int_mm(xi, wi))
    fbgemm = median_ms(lambda: quantised(x))
    print(
        f"{m}x{k}x{n}: fp32 {fp32:.2f} ms, _int_mm {int_mm:.2f} ms, "
        f"fbgemm dynamic int8 {fbgemm:.2f} ms (x{fp32 / fbgemm:.2f} of fp32)"
    )
