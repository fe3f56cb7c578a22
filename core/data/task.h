// Training data: seeded synthetic tasks a tiny GPT visibly learns, and a byte-level text loader.
//
// Determinism is the point. Row r of the global batch of step k is a pure function of
// (task seed, k, r): it does not depend on how many ranks exist or which rank asks for it. So a
// data-parallel run over N ranks sees exactly the same global batch as the single-device
// baseline, and the paradigm equivalence tests can compare parameters after training.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mgpu::data {

// B sequences of T tokens, row-major ([B, T]); targets[i] is the token that follows tokens[i].
// Which arrays of a batch a rank reads: a pipeline's first stage embeds the tokens, its last
// scores the targets, a middle stage needs only the shape.
struct BatchParts {
  bool tokens = true;
  bool targets = true;
};

struct Batch {
  int B = 0;
  int T = 0;
  std::vector<int32_t> tokens;   // B x T, or empty: a batch that carries no tokens (BatchParts)
  std::vector<int32_t> targets;  // likewise

  int64_t size() const { return static_cast<int64_t>(B) * T; }
  // Rows [begin, end) as a batch of their own (a rank's shard, a micro-batch), with the parts
  // asked for (an array this batch does not carry stays empty).
  Batch rows(int begin, int end, BatchParts parts = {}) const;
  bool operator==(const Batch& other) const = default;
};

// Knobs of the tasks; each task reads only its own.
struct TaskOptions {
  // reverse: `length` random symbols from an alphabet of `symbols`, a separator, the reverse.
  int symbols = 16;
  int length = 8;
  // modadd: "a + b = c ;" with a, b, c in [0, modulus).
  int modulus = 13;
  // markov: `vocab` tokens, each with `branching` likely successors.
  int markov_vocab = 64;
  int branching = 4;
  // text: the file to read and the sequence length it must be able to serve.
  std::string path;
  int seq_len = 64;
};

class Task {
 public:
  explicit Task(uint64_t seed) : seed_(seed) {}
  virtual ~Task() = default;

  virtual std::string name() const = 0;
  virtual int vocab_size() const = 0;

  // Rows [row_begin, row_end) of the global batch of `step`, each `seq` tokens long. Any rank can
  // ask for any rows; the answer only depends on (seed, step, row).
  Batch sample_rows(int64_t step, int row_begin, int row_end, int seq) const;
  // The whole global batch of `step`.
  Batch sample(int64_t step, int batch, int seq) const { return sample_rows(step, 0, batch, seq); }

  uint64_t seed() const { return seed_; }

 protected:
  // Fills out[0 .. n) with one stream of tokens (n = seq + 1: the inputs plus the last target).
  // `rng_seed` is already unique to (task seed, step, row).
  virtual void generate_row(uint64_t rng_seed, int n, int32_t* out) const = 0;

 private:
  uint64_t seed_;
};

// The names make_task accepts: "reverse", "modadd", "markov", "text".
std::vector<std::string> task_names();
// Throws std::invalid_argument listing the valid names for an unknown one, and the text loader's
// error for an unreadable file.
std::unique_ptr<Task> make_task(const std::string& name, uint64_t seed,
                                const TaskOptions& options = {});

// A 64-bit mixing function (splitmix64): turns (seed, step, row) into well-spread RNG seeds.
uint64_t mix_seed(uint64_t a, uint64_t b);

// ---- the tasks (exposed for lessons and tests that want their details) ------------------------

// Episodes "x1 .. xL SEP xL .. x1" back to back. The second half is fully predictable.
class ReverseTask : public Task {
 public:
  ReverseTask(uint64_t seed, int symbols, int length);
  std::string name() const override { return "reverse"; }
  int vocab_size() const override { return symbols_ + 1; }
  int separator() const { return symbols_; }

 protected:
  void generate_row(uint64_t rng_seed, int n, int32_t* out) const override;

 private:
  int symbols_, length_;
};

// Episodes "a + b = c ;" back to back, c = (a + b) mod p. Tokens 0..p-1 are numbers.
class ModAddTask : public Task {
 public:
  ModAddTask(uint64_t seed, int modulus);
  std::string name() const override { return "modadd"; }
  int vocab_size() const override { return modulus_ + 3; }
  int plus() const { return modulus_; }
  int equals() const { return modulus_ + 1; }
  int end() const { return modulus_ + 2; }

 protected:
  void generate_row(uint64_t rng_seed, int n, int32_t* out) const override;

 private:
  int modulus_;
};

// A random sparse Markov chain (fixed by the seed): each token has `branching` successors with
// random probabilities. A model that learns the bigram table gets far below ln(vocab).
class MarkovTask : public Task {
 public:
  MarkovTask(uint64_t seed, int vocab, int branching);
  std::string name() const override { return "markov"; }
  int vocab_size() const override { return vocab_; }
  // Successors and their probabilities of token t.
  const std::vector<int32_t>& successors(int t) const { return successors_[t]; }
  const std::vector<double>& probabilities(int t) const { return probabilities_[t]; }
  // Mean over tokens of the entropy of the next token (nats): roughly the best loss reachable.
  double mean_transition_entropy() const;

 protected:
  void generate_row(uint64_t rng_seed, int n, int32_t* out) const override;

 private:
  int vocab_;
  std::vector<std::vector<int32_t>> successors_;
  std::vector<std::vector<double>> probabilities_;
};

// Byte-level language modelling on a file (vocab 256): each row is a window at a random offset.
class TextTask : public Task {
 public:
  // Throws std::invalid_argument with one line when the file is missing, not a regular file,
  // above kMaxDataFileBytes (core/runtime/input_file.h), empty or shorter than seq_len + 1 bytes.
  TextTask(uint64_t seed, const std::string& path, int seq_len);
  // The same task on bytes already in memory; `source` names them in messages (the fuzz target).
  TextTask(uint64_t seed, const std::string& source, std::string bytes, int seq_len);
  std::string name() const override { return "text"; }
  int vocab_size() const override { return 256; }
  int64_t file_bytes() const { return static_cast<int64_t>(bytes_.size()); }

 protected:
  void generate_row(uint64_t rng_seed, int n, int32_t* out) const override;

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
};

}  // namespace mgpu::data
