// The race: mgpu's GPT training step on one GPU, in tokens/s, on the same model and settings as
// tests/bench/pytorch_gpt.py (PyTorch eager). tests/bench/race.sh runs both and prints the ratio.
//
//   bench_vs_pytorch [--layers 12 --dim 768 --heads 12 --seq 1024 --batch 4 --vocab 50257
//                     --steps 20 --warmup 3 --device cuda|cpu]
// --device cpu races PyTorch eager on the host (tests/bench/race_cpu.sh), wall clock.
// Prints machine-readable lines at the end:  RESULT mgpu tokens_per_s=12345.6 (wall clock) and
// RESULT mgpu tokens_per_cpu_s=... (this process's CPU time: steadier on a shared host, where the
// wall clock also counts the time other processes held the core).
// Without a GPU: one line and exit 2 (77 would mean "skipped" to ctest, but this is not a test).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>

#include "core/model/gpt.h"
#include "core/ops/cuda_module.h"
#include "core/optim/optimizer.h"
#include "core/runtime/context.h"
#include "core/runtime/gpu.h"

using namespace mgpu;

int main(int argc, char** argv) {
  GPTConfig cfg;
  cfg.vocab = 50257;
  cfg.layers = 12;
  cfg.dim = 768;
  cfg.heads = 12;
  cfg.seq_len = 1024;
  int64_t batch = 4;
  int steps = 20, warmup = 3;
  bool on_cpu = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--device") {
      const std::string device = argv[i + 1];
      if (device != "cpu" && device != "cuda") {
        std::fprintf(stderr, "bench_vs_pytorch: --device %s: use cpu or cuda\n", device.c_str());
        return 2;
      }
      on_cpu = device == "cpu";
      continue;
    }
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--layers")
      cfg.layers = int(value);
    else if (flag == "--dim")
      cfg.dim = int(value);
    else if (flag == "--heads")
      cfg.heads = int(value);
    else if (flag == "--seq")
      cfg.seq_len = int(value);
    else if (flag == "--batch")
      batch = value;
    else if (flag == "--vocab")
      cfg.vocab = int(value);
    else if (flag == "--steps")
      steps = int(value);
    else if (flag == "--warmup")
      warmup = int(value);
    else {
      std::fprintf(stderr, "bench_vs_pytorch: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  if (!on_cpu && !cuda::install()) {
    std::fprintf(stderr, "bench_vs_pytorch: no CUDA GPU found (nothing to race)\n");
    return 2;
  }
  const int64_t seq = cfg.seq_len;

  // One rank on cuda:0 (or the host), wall clock (no per-scope syncs), no trace: just the step.
  auto synchronize = [on_cpu] {
    if (!on_cpu) cuda::synchronize();
  };
  RankContext ctx(0, 1, on_cpu ? Device::cpu() : Device::cuda(0), HardwareProfile::ideal(0),
                  ClockKind::wall);
  ctx.tracer.enabled = false;
  ScopedRank scoped(ctx);

  GPT model(cfg);
  optim::AdamW optimizer(model.params(), optim::AdamWOptions{});
  std::mt19937_64 rng(1);
  std::vector<int32_t> tokens(size_t(batch * seq)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++) {
    tokens[i] = int32_t(rng() % uint64_t(cfg.vocab));
    targets[i] = int32_t(rng() % uint64_t(cfg.vocab));
  }
  GPTActivations acts = GPTActivations::allocate(cfg, batch, seq);  // reused every step

  auto step = [&] {
    model.zero_grad();
    float loss = model.forward(tokens, targets, acts);  // the loss copy-back syncs once per step
    model.backward(tokens, acts);
    optimizer.step();
    return loss;
  };
  for (int i = 0; i < warmup; ++i) step();
  synchronize();
  float loss = 0;
  auto cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  const double cpu0 = cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) loss = step();
  synchronize();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_secs = cpu_seconds() - cpu0;
  const double tokens_per_s = double(batch * seq) * steps / secs;
  const double tflops = model.flops_per_token(seq) * tokens_per_s / 1e12;
  std::printf(
      "mgpu: %s | %d layers, dim %d, %d heads, seq %lld, batch %lld, vocab %d, %lld params\n",
      on_cpu ? "cpu" : cuda::device_name(0).c_str(), cfg.layers, cfg.dim, cfg.heads, (long long)seq,
      (long long)batch, cfg.vocab, (long long)model.num_params());
  std::printf(
      "mgpu: fp32 AdamW, %.1f ms/step, %.0f tokens/s, %.1f TFLOP/s (model FLOPs), loss %.3f, "
      "memory peak %.2f GiB\n",
      1e3 * secs / steps, tokens_per_s, tflops, loss,
      double(ctx.allocator.stats().peak_total) / (1 << 30));
  std::printf("RESULT mgpu tokens_per_s=%.1f\n", tokens_per_s);
  std::printf("RESULT mgpu tokens_per_cpu_s=%.1f\n", double(batch * seq) * steps / cpu_secs);
  return 0;
}
