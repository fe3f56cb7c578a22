#!/usr/bin/env python3
"""The PyTorch side of the race (tests/bench/race.sh): the same GPT as mgpu's core/model/gpt.h,
in PyTorch eager mode, trained with AdamW on random tokens; prints tokens/s.

Same model: learned token + position embeddings, pre-LN blocks (LN -> qkv -> causal attention ->
proj, residual; LN -> 4C GELU(tanh) MLP, residual), final LN, LM head without bias (not tied).
Same precision: fp32 with TF32 OFF (mgpu's cuBLAS calls use plain FP32 unless MGPU_TF32=1).
Attention is written out (matmul, mask, softmax, matmul) as mgpu does; --sdpa uses PyTorch's
fused scaled_dot_product_attention instead, to show what a fused kernel buys.
Not the same: the initial weights (PyTorch's module defaults here, N(0, 0.02)-style in mgpu) and
the random tokens, so the printed losses differ; the work per step, which is what is timed, does
not depend on them.

    python3 tests/bench/pytorch_gpt.py --layers 12 --dim 768 --heads 12 --seq 1024 --batch 4
Last lines:  RESULT pytorch tokens_per_s=12345.6 (wall clock), RESULT pytorch tokens_per_cpu_s=...
(this process's CPU time, steadier on a shared host)
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_proj = nn.Linear(4 * dim, dim)

    def attention(self, x, sdpa):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x, sdpa):
        x = x + self.attention(self.ln1(x), sdpa)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, seq, layers, dim, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets, sdpa=False):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x, sdpa)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16 = autocast (mgpu has no bf16 path yet: compare fp32 with fp32)")
    p.add_argument("--sdpa", action="store_true", help="fused attention (not what mgpu does)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: eager on the host, as many threads as mgpu's BLAS (race_cpu.sh)")
    args = p.parse_args()
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("pytorch_gpt.py: no CUDA GPU found (nothing to race; --device cpu races on the host)")
        raise SystemExit(2)
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    torch.manual_seed(1)
    model = GPT(args.vocab, args.seq, args.layers, args.dim, args.heads).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, foreach=False)  # one kernel chain per tensor, as mgpu
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = model(idx, tgt, args.sdpa)
        loss.backward()
        opt.step()
        return loss.item()  # a host sync per step, as mgpu's loss copy-back

    for _ in range(args.warmup):
        step()
    sync()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    secs = time.perf_counter() - t0
    cpu_secs = time.process_time() - cpu0
    tps = args.batch * args.seq * args.steps / secs
    n = sum(p.numel() for p in model.parameters())
    where = torch.cuda.get_device_name() if dev == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"pytorch {torch.__version__}: {where} | {args.layers} layers, "
          f"dim {args.dim}, {args.heads} heads, seq {args.seq}, batch {args.batch}, "
          f"vocab {args.vocab}, {n} params")
    print(f"pytorch: {args.precision} AdamW{' +sdpa' if args.sdpa else ''}, "
          f"{1e3 * secs / args.steps:.1f} ms/step, {tps:.0f} tokens/s, loss {loss:.3f}"
          + (f", memory peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
             if dev == "cuda" else ""))
    print(f"RESULT pytorch tokens_per_s={tps:.1f}")
    print(f"RESULT pytorch tokens_per_cpu_s={args.batch * args.seq * args.steps / cpu_secs:.1f}")


if __name__ == "__main__":
    main()
