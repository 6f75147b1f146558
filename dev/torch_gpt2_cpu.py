#!/usr/bin/env python3
"""GPT-2 in eager PyTorch on the CPU: the peer that train_gpt2 and infer_gpt2 are measured against.

    python3 dev/torch_gpt2_cpu.py train [--model d12] [-b 4] [-t 64] [--steps 10] [--warmup 2] [--threads 2]
    python3 dev/torch_gpt2_cpu.py infer [--model d12] [-b 1] [--prompt-len 128] [-n 128] [--threads 2]

The model is GPT-2 as the CPU programs build it from -e dN: pre-LN blocks, GELU (tanh), layernorm eps 1e-5,
causal attention written out (q@k^T, mask, softmax, @v), 1024 positions, the vocabulary of 50257 padded to
50304 and tied to the classifier, fp32, seeded random init, random (seeded) tokens.

train: forward, cross-entropy, backward, global-norm clip at 1.0 and AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8,
no weight decay), as train_gpt2's defaults; wall ms per step, median over the --steps after --warmup steps.
infer: as infer_gpt2 counts it: one prefill forward over all B prompts fills a preallocated per-layer KV cache
(logits of each sequence's last row only) and gives the first token; then n-1 greedy decode steps of B tokens
each, forward and argmax. prefill tok/s = B*prompt / prefill forward time; decode tok/s = B*(n-1) / decode time.
--repeat K runs K times and reports medians. OMP_WAIT_POLICY defaults to passive, as the CPU programs are run.
Prints first a `blas:` line naming the BLAS torch's matmuls really call, last one `result:` line.
"""
import argparse
import ctypes
import math
import os
import statistics
import sys
import time

VOCAB, PADDED_VOCAB, MAX_T = 50257, 50304, 1024
MODELS = {"d4": (4, 256, 4), "d6": (6, 384, 6), "d12": (12, 768, 12),
          "d24": (24, 1024, 16), "d36": (36, 1280, 20), "d48": (48, 1600, 25)}  # layers, channels, heads


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv):
    ap = Parser(description=__doc__.split("\n")[0], epilog="\n".join(__doc__.split("\n")[2:]),
                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{train,infer}")
    common = Parser(add_help=False)
    common.add_argument("--model", choices=list(MODELS), default="d12", help="GPT-2 shape [d12 = 124M]")
    common.add_argument("--threads", type=int, default=2,
                        help="torch.set_num_threads, and the BLAS's thread count (set before torch loads) [2]")
    common.add_argument("--repeat", type=int, default=1, help="measure K times, report the medians [1]")
    common.add_argument("--seed", type=int, default=1337, help="seed for the init and the tokens [1337]")
    tr = sub.add_parser("train", parents=[common], help="time training steps")
    tr.add_argument("-b", "--batch", type=int, default=4, help="micro-batch B [4]")
    tr.add_argument("-t", "--seq-len", type=int, default=64, help="sequence length T [64]")
    tr.add_argument("--steps", type=int, default=10, help="timed steps per repeat [10]")
    tr.add_argument("--warmup", type=int, default=2, help="untimed steps before the first repeat [2]")
    inf = sub.add_parser("infer", parents=[common], help="time prefill and greedy KV-cache decode")
    inf.add_argument("-b", "--batch", type=int, default=1, help="sequences decoded together [1]")
    inf.add_argument("--prompt-len", type=int, default=128, help="random prompt tokens per sequence [128]")
    inf.add_argument("-n", "--new-tokens", type=int, default=128, help="tokens generated per sequence [128]")
    a = ap.parse_args(argv)
    for name in ("threads", "repeat", "batch", "seq_len", "steps", "prompt_len", "new_tokens"):
        if getattr(a, name, 1) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if getattr(a, "warmup", 0) < 0:
        ap.error("--warmup must be at least 0")
    if a.cmd == "train" and a.seq_len > MAX_T or a.cmd == "infer" and a.prompt_len + a.new_tokens > MAX_T:
        ap.error(f"the sequence exceeds the model's {MAX_T} positions")
    return a


def blas_report(torch):
    """Names the BLAS that torch's matmuls call; returns (text, is_a_peer). A process can map several (Debian's
    liblapack pulls in OpenBLAS even when libblas.so.3 is the reference one), so this finds the library in
    /proc/self/maps whose mapping holds the sgemm_ that libtorch_cpu resolves, after one matmul has run."""
    x = torch.randn(64, 64)
    (x @ x).sum().item()
    maps = []  # (lo, hi, path) of mapped files
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                maps.append((lo, hi, parts[5].strip()))
    path = None
    try:
        tc = next(p for _, _, p in maps if os.path.basename(p).startswith("libtorch_cpu"))
        addr = ctypes.cast(ctypes.CDLL(tc).sgemm_, ctypes.c_void_p).value
        path = next(p for lo, hi, p in maps if lo <= addr < hi)
    except (StopIteration, AttributeError, OSError):  # no libtorch_cpu or no sgemm_: name what is mapped
        names = ("libblas", "libopenblas", "libblis", "libmkl")
        path = next((p for _, _, p in maps if any(k in os.path.basename(p) for k in names)), None)
    if path is None:
        return "none found in /proc/self/maps", False
    real = os.path.realpath(path)
    d = os.path.basename(os.path.dirname(real))
    if "openblas" in real:
        return f"OpenBLAS ({d if d.startswith('openblas') else 'openblas'}, {real})", True
    if "blis" in real:
        return f"BLIS ({d}, {real})", True
    if "mkl" in real or "libtorch_cpu" in real and torch.backends.mkl.is_available():
        return f"MKL ({real})", True
    if "/blas/" in real:
        return f"reference BLAS (Debian's libblas3, {real})", False
    return f"unknown ({real})", False


def build_model(torch, L, C, NH):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C, eps=1e-5), nn.LayerNorm(C, eps=1e-5)
            self.qkv, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def attention(self, x, cache, pos):
            B, T, _ = x.shape
            q, k, v = self.qkv(x).view(B, T, 3, NH, C // NH).permute(2, 0, 3, 1, 4)  # each (B, NH, T, hs)
            if cache is not None:  # write this step's keys and values, attend to everything so far
                cache[0][:, :, pos:pos + T] = k
                cache[1][:, :, pos:pos + T] = v
                k, v = cache[0][:, :, :pos + T], cache[1][:, :, :pos + T]
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
            if T > 1:  # query i (at position pos+i) sees keys 0..pos+i; one new token sees them all
                att = att.masked_fill(~self.causal[pos:pos + T, :pos + T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            return self.attn_proj(y.transpose(1, 2).reshape(B, T, C))

        def forward(self, x, cache=None, pos=0):
            x = x + self.attention(self.ln1(x), cache, pos)
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(PADDED_VOCAB, C), nn.Embedding(MAX_T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C, eps=1e-5)
            causal = torch.tril(torch.ones(MAX_T, MAX_T, dtype=torch.bool))
            for b in self.blocks:
                b.causal = causal  # shared, not a parameter
            for name, p in self.named_parameters():  # GPT-2's init; residual projections scaled by 1/sqrt(2L)
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif "ln" in name:
                    nn.init.ones_(p)
                else:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx, caches=None, pos=0, last_only=False):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(pos, pos + T))
            for i, block in enumerate(self.blocks):
                x = block(x, None if caches is None else caches[i], pos)
            if last_only:
                x = x[:, -1:, :]
            return self.lnf(x) @ self.wte.weight.t()  # tied classifier, (B, T, 50304)

    return GPT()


def train(torch, model, a):
    F = torch.nn.functional
    B, T = a.batch, a.seq_len
    gen = torch.Generator().manual_seed(a.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    total = a.warmup + a.steps * a.repeat
    times = []
    for step in range(1, total + 1):
        data = torch.randint(0, VOCAB, (B, T + 1), generator=gen)
        t0 = time.perf_counter()
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits[..., :VOCAB].reshape(-1, VOCAB), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        if step > a.warmup:
            times.append(ms)
        print(f"step {step:4d}/{total} | loss {loss.item():.6f} | norm {norm.item():.4f} | {ms:.2f} ms"
              f"{' (warmup)' if step <= a.warmup else ''}", flush=True)
    med = statistics.median(statistics.median(times[r * a.steps:(r + 1) * a.steps]) for r in range(a.repeat))
    print(f"result: train model={a.model} B={B} T={T} threads={a.threads} ms_per_step_median={med:.2f} "
          f"tok_per_s={B * T / (med / 1e3):.1f}")


def infer(torch, model, a, L, C, NH):
    B, P, N = a.batch, a.prompt_len, a.new_tokens
    gen = torch.Generator().manual_seed(a.seed + 2)
    prompts = torch.randint(0, VOCAB, (B, P), generator=gen)
    caches = [(torch.empty(B, NH, P + N, C // NH), torch.empty(B, NH, P + N, C // NH)) for _ in range(L)]
    prefill_rates, decode_rates = [], []
    with torch.inference_mode():
        for r in range(1, a.repeat + 1):
            t0 = time.perf_counter()
            logits = model(prompts, caches, 0, last_only=True)
            prefill_s = time.perf_counter() - t0
            out = [logits[:, -1, :VOCAB].argmax(-1)]  # the first new token, from the prefill
            t0 = time.perf_counter()
            for i in range(1, N):
                logits = model(out[-1].view(B, 1), caches, P + i - 1)
                out.append(logits[:, -1, :VOCAB].argmax(-1))
            decode_s = time.perf_counter() - t0
            prefill_rates.append(B * P / prefill_s)
            decode_rates.append(B * (N - 1) / decode_s if N > 1 else float("nan"))
            print(f"run {r}/{a.repeat} | prefill {prefill_s * 1e3:.2f} ms, {prefill_rates[-1]:.1f} tok/s | "
                  f"decode {N - 1} steps {decode_s * 1e3:.2f} ms, {decode_rates[-1]:.1f} tok/s | "
                  f"first ids {torch.stack(out, 1)[0, :8].tolist()}", flush=True)
    print(f"result: infer model={a.model} B={B} prompt={P} new={N} threads={a.threads} "
          f"prefill_tok_per_s={statistics.median(prefill_rates):.1f} "
          f"decode_tok_per_s={statistics.median(decode_rates):.1f}")


def main(argv):
    a = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)  # the BLAS reads these when it loads, i.e. at `import torch`
    # As for train_gpt2/infer_gpt2: spinning OpenMP workers fight OpenBLAS's own threads for the cores (3x slower
    # decode on 2 cores when active); an OMP_WAIT_POLICY set by the caller wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    blas, is_peer = blas_report(torch)
    print(f"blas: {blas}")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, OMP_WAIT_POLICY "
          f"{os.environ['OMP_WAIT_POLICY']}, python {sys.version.split()[0]}")
    if not is_peer:
        print(f"warning: PyTorch uses the {blas}, not an optimised BLAS: the reference one is ~30x slower and no "
              "peer; install libopenblas0 (libopenblas0-pthread) and select it with update-alternatives --config "
              "libblas.so.3-x86_64-linux-gnu", file=sys.stderr)
    L, C, NH = MODELS[a.model]
    model = build_model(torch, L, C, NH)
    print(f"model {a.model}: L={L} C={C} NH={NH}, {sum(p.numel() for p in model.parameters())} parameters")
    if a.cmd == "train":
        train(torch, model, a)
    else:
        infer(torch, model, a, L, C, NH)


if __name__ == "__main__":
    main(sys.argv[1:])
