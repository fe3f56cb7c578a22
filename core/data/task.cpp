#include "core/data/task.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "core/runtime/input_file.h"

namespace mgpu::data {

namespace {

// std::uniform_*_distribution are implementation-defined (libstdc++ and libc++ differ); the raw
// std::mt19937_64 stream is not. Mapping it ourselves keeps batches identical on every host.
int64_t uniform_below(std::mt19937_64& rng, int64_t n) {
  return static_cast<int64_t>(rng() % static_cast<uint64_t>(n));  // bias < n / 2^64: negligible
}
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace

Batch Batch::rows(int begin, int end, BatchParts parts) const {
  if (begin < 0 || end < begin || end > B)
    throw std::out_of_range(fmt::format("rows [{}, {}) of a batch of {}", begin, end, B));
  Batch out;
  out.B = end - begin;
  out.T = T;
  auto first = static_cast<int64_t>(begin) * T, last = static_cast<int64_t>(end) * T;
  if (parts.tokens && !tokens.empty())
    out.tokens.assign(tokens.begin() + first, tokens.begin() + last);
  if (parts.targets && !targets.empty())
    out.targets.assign(targets.begin() + first, targets.begin() + last);
  return out;
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  // splitmix64 of a combination: nearby inputs (step 3 vs 4) give unrelated outputs.
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Batch Task::sample_rows(int64_t step, int row_begin, int row_end, int seq) const {
  if (seq < 1) throw std::invalid_argument(fmt::format("sequence length {} must be >= 1", seq));
  if (row_begin < 0 || row_end < row_begin)
    throw std::invalid_argument(fmt::format("bad row range [{}, {})", row_begin, row_end));
  Batch b;
  b.B = row_end - row_begin;
  b.T = seq;
  b.tokens.resize(static_cast<size_t>(b.size()));
  b.targets.resize(static_cast<size_t>(b.size()));
  std::vector<int32_t> stream(static_cast<size_t>(seq) + 1);
  uint64_t step_seed = mix_seed(seed_, static_cast<uint64_t>(step));
  for (int r = row_begin; r < row_end; ++r) {
    // The row's seed depends on (seed, step, global row) only: rank-count independent.
    generate_row(mix_seed(step_seed, static_cast<uint64_t>(r)), seq + 1, stream.data());
    int64_t base = static_cast<int64_t>(r - row_begin) * seq;
    for (int t = 0; t < seq; ++t) {
      b.tokens[base + t] = stream[t];
      b.targets[base + t] = stream[t + 1];  // next-token prediction
    }
  }
  return b;
}

// ---- reverse ----------------------------------------------------------------------------------

ReverseTask::ReverseTask(uint64_t seed, int symbols, int length)
    : Task(seed), symbols_(symbols), length_(length) {
  if (symbols < 2 || length < 1)
    throw std::invalid_argument(fmt::format(
        "reverse task needs symbols >= 2 and length >= 1 (got {}, {})", symbols, length));
}

void ReverseTask::generate_row(uint64_t rng_seed, int n, int32_t* out) const {
  std::mt19937_64 rng(rng_seed);
  std::vector<int32_t> episode;
  int filled = 0;
  while (filled < n) {
    episode.clear();
    for (int i = 0; i < length_; ++i)
      episode.push_back(static_cast<int32_t>(uniform_below(rng, symbols_)));
    episode.push_back(separator());
    for (int i = length_ - 1; i >= 0; --i) episode.push_back(episode[i]);
    for (int32_t tok : episode) {
      if (filled == n) break;
      out[filled++] = tok;
    }
  }
}

// ---- modadd -----------------------------------------------------------------------------------

ModAddTask::ModAddTask(uint64_t seed, int modulus) : Task(seed), modulus_(modulus) {
  if (modulus < 2)
    throw std::invalid_argument(fmt::format("modadd task needs modulus >= 2 (got {})", modulus));
}

void ModAddTask::generate_row(uint64_t rng_seed, int n, int32_t* out) const {
  std::mt19937_64 rng(rng_seed);
  int filled = 0;
  while (filled < n) {
    auto a = static_cast<int32_t>(uniform_below(rng, modulus_));
    auto b = static_cast<int32_t>(uniform_below(rng, modulus_));
    const int32_t episode[6] = {a, plus(), b, equals(), (a + b) % modulus_, end()};
    for (int32_t tok : episode) {
      if (filled == n) break;
      out[filled++] = tok;
    }
  }
}

// ---- markov -----------------------------------------------------------------------------------

MarkovTask::MarkovTask(uint64_t seed, int vocab, int branching)
    : Task(seed), vocab_(vocab), successors_(vocab), probabilities_(vocab) {
  if (vocab < 2 || branching < 1 || branching > vocab)
    throw std::invalid_argument(fmt::format(
        "markov task needs vocab >= 2 and 1 <= branching <= vocab (got {}, {})", vocab, branching));
  // The chain itself comes from the task seed (not the step): every batch speaks one language.
  std::mt19937_64 rng(mix_seed(seed, 0x6d61726b6f76ULL));
  std::vector<int32_t> all(vocab);
  for (int t = 0; t < vocab; ++t) all[t] = t;
  for (int t = 0; t < vocab; ++t) {
    // Fisher-Yates by hand: std::shuffle's algorithm is also library-specific.
    for (int i = vocab - 1; i > 0; --i) std::swap(all[i], all[uniform_below(rng, i + 1)]);
    successors_[t].assign(all.begin(), all.begin() + branching);
    double total = 0;
    for (int k = 0; k < branching; ++k) {
      probabilities_[t].push_back(0.1 + 0.9 * uniform01(rng));
      total += probabilities_[t].back();
    }
    for (double& p : probabilities_[t]) p /= total;
  }
}

double MarkovTask::mean_transition_entropy() const {
  double sum = 0;
  for (int t = 0; t < vocab_; ++t)
    for (double p : probabilities_[t]) sum -= p * std::log(p);
  return sum / vocab_;
}

void MarkovTask::generate_row(uint64_t rng_seed, int n, int32_t* out) const {
  std::mt19937_64 rng(rng_seed);
  auto tok = static_cast<int32_t>(uniform_below(rng, vocab_));
  for (int i = 0; i < n; ++i) {
    out[i] = tok;
    // Pick the next token by walking the cumulative probabilities.
    double u = uniform01(rng);
    const auto& probs = probabilities_[tok];
    size_t k = 0;
    while (k + 1 < probs.size() && u >= probs[k]) u -= probs[k++];
    tok = successors_[tok][k];
  }
}

// ---- text -------------------------------------------------------------------------------------

TextTask::TextTask(uint64_t seed, const std::string& path, int seq_len)
    : TextTask(seed, path, read_input_file(path, "--data", kMaxDataFileBytes), seq_len) {}

TextTask::TextTask(uint64_t seed, const std::string& source, std::string bytes, int seq_len)
    : Task(seed), path_(echo_input(source, 120)), bytes_(bytes.begin(), bytes.end()) {
  if (bytes_.empty())
    throw std::invalid_argument(
        fmt::format("cannot read data file '{}': the file is empty", path_));
  if (static_cast<int64_t>(bytes_.size()) < static_cast<int64_t>(seq_len) + 1)
    throw std::invalid_argument(fmt::format(
        "cannot read data file '{}': it has {} bytes but a sequence of {} needs at least {}", path_,
        bytes_.size(), seq_len, int64_t{seq_len} + 1));
}

void TextTask::generate_row(uint64_t rng_seed, int n, int32_t* out) const {
  if (static_cast<int64_t>(bytes_.size()) < n)
    throw std::invalid_argument(
        fmt::format("data file '{}' has {} bytes, too short for sequences of {} (+1 target)", path_,
                    bytes_.size(), n - 1));
  std::mt19937_64 rng(rng_seed);
  int64_t last_start = static_cast<int64_t>(bytes_.size()) - n;
  int64_t start = uniform_below(rng, last_start + 1);
  for (int i = 0; i < n; ++i) out[i] = bytes_[start + i];
}

// ---- factory ----------------------------------------------------------------------------------

std::vector<std::string> task_names() {
  return {"reverse", "modadd", "markov", "text"};
}

std::unique_ptr<Task> make_task(const std::string& name, uint64_t seed, const TaskOptions& o) {
  if (name == "reverse") return std::make_unique<ReverseTask>(seed, o.symbols, o.length);
  if (name == "modadd") return std::make_unique<ModAddTask>(seed, o.modulus);
  if (name == "markov") return std::make_unique<MarkovTask>(seed, o.markov_vocab, o.branching);
  if (name == "text") {
    if (o.path.empty())
      throw std::invalid_argument("task 'text' needs a data file (TaskOptions::path)");
    return std::make_unique<TextTask>(seed, o.path, o.seq_len);
  }
  throw std::invalid_argument(
      fmt::format("unknown task '{}': valid tasks are {}", name, fmt::join(task_names(), ", ")));
}

}  // namespace mgpu::data
