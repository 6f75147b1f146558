#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the attention benchmark's inputs (dev/cuda/attention.cu runs this).

    attention_torch.py DIR B T NH HS

DIR holds qkv.bf16 (B, T, 3, NH, HS) and dout.bf16 (B, T, NH, HS), raw little-endian bf16, as the benchmark
wrote them. Runs causal SDPA forward and backward on the GPU with PyTorch's default backend choice, timed like
the benchmark's own kernels (CUDA events, median of 20 runs after 5 warm-up runs, L2 flushed before each), writes
its forward output to DIR/out_torch.bf16 (B, T, NH, HS) for the benchmark to compare with its own, and prints
one line per phase, in the benchmark's own format:

    torch sdpa <phase>   <ms> ms |   <TFLOP/s> TFLOP/s (<kernel PyTorch chose>)

FLOPs are the benchmark's: causal forward 4*B*NH*T^2*HS/2, backward 2.5x the forward. Exits 3 when PyTorch or a
CUDA device is not available (the benchmark then says so and goes on).
"""
import os
import sys


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: attention_torch.py DIR B T NH HS")
    d = sys.argv[1]
    B, T, NH, HS = (int(x) for x in sys.argv[2:])
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"torch: not available ({e})")
        sys.exit(3)
    if not torch.cuda.is_available():
        print("torch: no CUDA device visible to PyTorch")
        sys.exit(3)
    dev = torch.device("cuda")

    def load(name, shape):
        raw = torch.from_file(os.path.join(d, name), shared=False, size=int(torch.Size(shape).numel()),
                              dtype=torch.bfloat16)
        return raw.view(shape).to(dev)

    qkv = load("qkv.bf16", (B, T, 3, NH, HS))
    dout = load("dout.bf16", (B, T, NH, HS)).transpose(1, 2)  # (B, NH, T, HS)
    q, k, v = (qkv[:, :, i].transpose(1, 2).contiguous().requires_grad_(True) for i in range(3))

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    y = fwd()
    y.transpose(1, 2).contiguous().cpu().view(torch.int16).numpy().tofile(os.path.join(d, "out_torch.bf16"))

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * max(l2, 1 << 20), dtype=torch.uint8, device=dev)

    def time_ms(fn, warmup=5, repeats=20):
        for _ in range(warmup):
            fn()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ms = []
        for _ in range(repeats):
            flush.zero_()
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        return sorted(ms)[repeats // 2]

    with torch.no_grad():
        t_fwd = time_ms(fwd)
    y = fwd()
    t_bwd = time_ms(lambda: torch.autograd.grad(y, (q, k, v), dout, retain_graph=True))

    # Which kernel PyTorch picked: the profiler's kernel names of one forward.
    backend = "unknown backend"
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            with torch.no_grad():
                fwd()
            torch.cuda.synchronize()
        names = [e.key for e in prof.key_averages() if "attention" in e.key.lower() or "fmha" in e.key.lower()
                 or "flash" in e.key.lower()]
        if names:
            backend = names[0][:60].replace(" ", "_")
    except Exception:  # the backend name is a label only
        pass

    fwd_flops = 4.0 * B * NH * T * T * HS / 2
    for phase, ms, flops in (("forward", t_fwd, fwd_flops), ("backward", t_bwd, 2.5 * fwd_flops)):
        name = f"torch sdpa {phase}"
        print(f"{name:<36s} {ms:9.4f} ms | {flops / (ms * 1e-3) / 1e12:7.1f} TFLOP/s ({backend})", flush=True)


if __name__ == "__main__":
    main()
