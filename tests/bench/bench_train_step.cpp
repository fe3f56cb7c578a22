// Tokens per second of GPT::forward_backward (+ a plain SGD update) on the default lesson's
// tiny config, on one CPU core. The lesson budget is ~100-200 steps in a few seconds.
#include <chrono>
#include <cstdio>
#include <random>

#include "core/model/gpt.h"
#include "core/ops/ops.h"
#include "core/runtime/context.h"

using namespace mgpu;

namespace {
// Runs `steps` SGD steps of forward_backward at (batch, seq) and prints the throughput.
void bench(const GPTConfig& cfg, int64_t batch, int64_t seq, int steps) {
  GPT model(cfg);
  std::mt19937_64 rng(1);
  std::vector<int32_t> tokens(size_t(batch * seq)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++) {
    tokens[i] = int32_t(rng() % uint64_t(cfg.vocab));
    targets[i] = (tokens[i] + 1) % cfg.vocab;  // learnable: next id
  }
  float first = 0, loss = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; step++) {
    model.zero_grad();
    loss = model.forward_backward(tokens, targets, batch, seq);
    if (step == 0) first = loss;
    for (Param* p : model.params()) ops::axpy(p->data, -0.1f, p->grad);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens_per_step = double(batch * seq);
  std::printf("vocab %d layers %d dim %d heads %d (%lld params), batch %lld seq %lld: ", cfg.vocab,
              cfg.layers, cfg.dim, cfg.heads, (long long)model.num_params(), (long long)batch,
              (long long)seq);
  std::printf("%.2f ms/step, %.0f tokens/s, %.2f GFLOP/s; loss %.3f -> %.3f over %d steps\n",
              1e3 * secs / steps, tokens_per_step * steps / secs,
              model.flops_per_token(seq) * tokens_per_step * steps / secs / 1e9, first, loss,
              steps);
}
}  // namespace

int main() {
  current_rank().tracer.enabled = false;
  GPTConfig cfg;  // vocab 64, seq_len 64, layers 2, dim 64, heads 4
  bench(cfg, 8, 32, 100);
  bench(cfg, 16, 64, 50);
  return 0;
}
