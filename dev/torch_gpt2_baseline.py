#!/usr/bin/env python3
"""Compiled PyTorch's training throughput on the model train_gpt2cu trains, for the ratio of the two.

    python3 dev/torch_gpt2_baseline.py [-e d12] [-t 1024] [-B "16 64"] [-x 40] [-w 10] [-i SHARD]
                                       [--device cuda|cpu] [--no-compile]

GPT-2 as the trainers build it from -e dN (N layers, 64*N channels, N heads, the vocabulary padded to 50304 and tied
to the classifier, 1024 positions), trained from scratch with AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, no weight
decay, the global gradient norm clipped at 1.0: train_gpt2cu's defaults), bf16 autocast on the GPU, causal
scaled_dot_product_attention, torch.compile unless --no-compile. Every micro-batch B gets a fresh model and
compilation. The step is timed as train_gpt2cu times it: wall time from the batch's upload to the optimizer
step's end, the device synchronised; tok/s is B*T over that time, averaged, like ms/step, over the steps after the
first -w (scripts/benchmark_gpu.sh's warmup). memory is the device memory in use after the last step (total minus
free, as train_gpt2cu's step lines print it). Prints one row per B, in scripts/benchmark_gpu.sh's columns less MFU,
or "failed: <reason>" for a B that does not run (out of memory).

Data: -i SHARD, an llm.c token shard (data/tinyshakespeare/tiny_shakespeare_train.bin), read in order and wrapped;
without it, random tokens. --device cpu --no-compile with a small -e and -t runs anywhere torch does.
Bad flags: one line, exit 2; an unreadable shard: one line, exit 1.
"""
import argparse
import math
import struct
import sys
import time

PADDED_VOCAB = 50304
VOCAB = 50257
MAX_T = 1024
SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_INTS = 20240520, 1, 256


class Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"torch_gpt2_baseline.py: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def positive(flag):
    def conv(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag}: expected a positive integer, got '{s}'")
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{flag}: expected a positive integer, got '{s}'")
        return v
    return conv


def parse_args(argv):
    ap = Parser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="\n".join(__doc__.split("\n")[2:]))
    ap.add_argument("-e", default="d12", help="model dN [d12]")
    ap.add_argument("-t", type=positive("-t"), default=1024, help="sequence length [1024]")
    ap.add_argument("-B", default="16 64", help="micro-batches, space-separated [\"16 64\"]")
    ap.add_argument("-x", type=positive("-x"), default=40, help="steps per B [40]")
    ap.add_argument("-w", type=int, default=10, help="warmup steps left out of the averages [10]")
    ap.add_argument("-i", help="llm.c token shard to train on [random tokens]")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--no-compile", action="store_true", help="eager PyTorch")
    a = ap.parse_args(argv)
    if not (len(a.e) > 1 and a.e[0] == "d" and a.e[1:].isdigit() and int(a.e[1:]) > 0):
        ap.error(f"-e: expected dN with N > 0, got '{a.e}'")
    a.layers = int(a.e[1:])
    try:
        a.batches = [int(b) for b in a.B.split()]
    except ValueError:
        a.batches = []
    if not a.batches or min(a.batches) <= 0:
        ap.error(f"-B: expected positive integers, got '{a.B}'")
    if a.t > MAX_T:
        ap.error(f"-t: at most {MAX_T}, got {a.t}")
    if not 0 <= a.w < a.x:
        ap.error(f"-w: expected 0 <= -w < -x ({a.x}), got {a.w}")
    return a


def read_shard(path):
    """The tokens of an llm.c shard (header: 256 int32, magic, version, count; then uint16 tokens)."""
    try:
        with open(path, "rb") as f:
            head = f.read(SHARD_HEADER_INTS * 4)
            body = f.read()
    except OSError as e:
        raise SystemExit(f"torch_gpt2_baseline.py: -i {path}: {e.strerror}")
    if len(head) < SHARD_HEADER_INTS * 4:
        raise SystemExit(f"torch_gpt2_baseline.py: -i {path}: shorter than a shard header")
    magic, version, count = struct.unpack("<3i", head[:12])
    if magic != SHARD_MAGIC or version != SHARD_VERSION or len(body) < 2 * count:
        raise SystemExit(f"torch_gpt2_baseline.py: -i {path}: not an llm.c token shard (magic {magic}, version "
                         f"{version}, {count} tokens for {len(body)} bytes)")
    return body[:2 * count]


def build(torch, layers):
    nn, F = torch.nn, torch.nn.functional
    C, NH = 64 * layers, layers

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(PADDED_VOCAB, C), nn.Embedding(MAX_T, C)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, PADDED_VOCAB, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            for name, p in self.named_parameters():  # GPT-2's init, residual projections scaled by 1/sqrt(2L)
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith(".bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, PADDED_VOCAB), targets.view(-1))

    return GPT()


def measure(torch, a, B, tokens):
    """(ms/step, tok/s, memory GiB) averaged over the steps after the warmup."""
    dev = torch.device(a.device)
    torch.manual_seed(1337)
    model = build(torch, a.layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                            fused=a.device == "cuda")
    step_fn = model if a.no_compile else torch.compile(model)
    T, n = a.t, B * a.t
    pos = 0

    def batch():
        nonlocal pos
        if tokens is None:
            return (torch.randint(0, VOCAB, (B, T), dtype=torch.long),) * 2
        nbytes = 2 * (n + 1)
        if pos + nbytes > len(tokens):
            pos = 0
        chunk = torch.frombuffer(bytearray(tokens[pos:pos + nbytes]), dtype=torch.int16).long() & 0xFFFF
        pos += 2 * n
        return chunk[:-1].view(B, T), chunk[1:].view(B, T)

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    times = []
    for _ in range(a.x):
        x, y = batch()
        sync()
        t0 = time.perf_counter()
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.device == "cuda"):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - t0)
        if not math.isfinite(loss.item()):
            raise RuntimeError(f"loss {loss.item()} at step {len(times)}")
    steady = times[a.w:]
    ms = 1e3 * sum(steady) / len(steady)
    tok_s = sum(n / t for t in steady) / len(steady)
    mem = 0.0
    if a.device == "cuda":
        free, total = torch.cuda.mem_get_info()
        mem = (total - free) / 2**30
    return ms, tok_s, mem


def main(argv):
    a = parse_args(argv)
    tokens = read_shard(a.i) if a.i else None
    import torch  # after the flags: --help and bad flags need no torch

    if a.device == "cuda":
        if not torch.cuda.is_available():
            print("torch_gpt2_baseline.py: --device cuda: torch sees no CUDA device", file=sys.stderr)
            return 1
        torch.set_float32_matmul_precision("high")  # TF32 for what autocast leaves in fp32
        name = torch.cuda.get_device_name(0)
    else:
        name = "cpu"
    print(f"torch {torch.__version__} on {name}, {'eager' if a.no_compile else 'torch.compile'}, "
          f"{'shard ' + a.i if a.i else 'random tokens'}, {a.x} steps, averages after {a.w}")
    print(f"{'model':<6} {'T':<6} {'B':<5} {'ms/step':>10} {'tok/s':>12} {'memory':>9}")
    rc = 0
    for B in a.batches:
        try:
            ms, tok_s, mem = measure(torch, a, B, tokens)
            print(f"{a.e:<6} {a.t:<6} {B:<5} {ms:10.2f} {tok_s:12.0f} {mem:6.2f} GiB", flush=True)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            reason = "out of memory" if "out of memory" in str(e) else str(e).splitlines()[0][:200]
            print(f"{a.e:<6} {a.t:<6} {B:<5} failed: {reason}", flush=True)
            rc = 1
        if a.device == "cuda":
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
