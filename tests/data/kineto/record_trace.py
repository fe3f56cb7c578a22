#!/usr/bin/env python3
"""Records a PyTorch profiler (Kineto) trace of a small 2-process data-parallel job on the CPU
(gloo), one file per rank: OUT_DIR/rank-0.json and rank-1.json. Each step is a forward, a
backward, an all-reduce of the gradients and an SGD step; rank 1 does extra work each step, so
the trace has a straggler that rank 0 waits for inside the all-reduce.

    python3 tests/data/kineto/record_trace.py OUT_DIR [--steps 3] [--nccl]

Needs PyTorch (Debian: apt-get install python3-torch); no GPU. With --nccl: the same job on two
GPUs over NCCL, profiling CUDA too (a PyTorch built with CUDA and Kineto; docs/cuda.md's GPU
checklist).
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule


def train(rank, world_size, out_dir, steps, nccl):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl" if nccl else "gloo", rank=rank, world_size=world_size)
    device = torch.device(f"cuda:{rank}" if nccl else "cpu")
    if nccl:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256, device=device), torch.randn(64, 256, device=device)

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if rank == 1:  # the straggler: more work before its gradients are ready
            for _ in range(8):
                torch.mm(torch.randn(256, 256, device=device), torch.randn(256, 256, device=device))
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world_size
        opt.step()

    path = os.path.join(out_dir, f"rank-{rank}.json")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if nccl else [])
    with profile(activities=activities, profile_memory=True,
                 schedule=schedule(wait=0, warmup=1, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(1 + steps):
            step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--nccl", action="store_true", help="two GPUs over NCCL")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    mp.spawn(train, args=(2, args.out_dir, args.steps, args.nccl), nprocs=2)
