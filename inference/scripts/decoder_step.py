"""The linear layers of one Qwen2.5-0.5B decoding step (24 layers and the vocabulary
projection, random weights), at 1 and 8 rows: float32, the shipped int8 mix (the
feed-forward's output and the vocabulary projection in fp16, the rest int8) and fp16
everywhere, medians of five, with 2 threads, on the torch wheel that tch links (2.13.0):

    ~/.cache/engram/venv/bin/python inference/scripts/decoder_step.py
"""

import time, torch, warnings
warnings.filterwarnings("ignore")
torch.set_num_threads(2)
shapes = [(896,896),(896,128),(896,128),(896,896),(896,4864),(896,4864),(4864,896)]
layers = []
for i in range(24):
    for j,(k,n) in enumerate(shapes):
        w = torch.randn(n,k)*0.02
        q8 = torch.ops.quantized.linear_prepack(torch.quantize_per_channel(w,(w.abs().amax(1)/127).double(),torch.zeros(n,dtype=torch.long),0,torch.qint8),None)
        f16 = torch.ops.quantized.linear_prepack_fp16(w,None)
        layers.append((k, w, q8, f16, j==6))
wo = torch.randn(151936,896)*0.02
out = (896, wo, None, torch.ops.quantized.linear_prepack_fp16(wo,None), True)
layers.append(out)
def step(m, mode):
    for k,w,q8,f16,outlier in layers:
        x = torch.randn(m,k)
        if mode=="fp32": torch.nn.functional.linear(x,w)
        elif mode=="int8" and not outlier: torch.ops.quantized.linear_dynamic(x,q8,False)
        else: torch.ops.quantized.linear_dynamic_fp16(x,f16)
res = {}
with torch.no_grad():
    for rnd in range(5):
        for m in (1,8):
            for mode in ("fp32","int8","fp16"):
                t=time.perf_counter(); step(m,mode); res.setdefault((m,mode),[]).append(time.perf_counter()-t)
for (m,mode),ts in sorted(res.items()):
    ts.sort(); print(f"rows {m} {mode}: median {ts[len(ts)//2]*1e3:.0f} ms per step")
