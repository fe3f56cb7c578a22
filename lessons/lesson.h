// A lesson: a name, a one-line summary, its own options (with defaults) and a run() that
// narrates what it does. The `mgpu` program lists them, parses `mgpu run NAME [options]` and
// calls run(). Lessons print to `out` so tests can run them in-process and read what they say.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/model/config.h"
#include "core/world/world.h"

namespace mgpu::lessons {

// Bad options or an impossible configuration: the program prints the message on one line and
// exits with code 2.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Options every lesson shares: where it runs, the model, the training loop and the output.
struct CommonOptions {
  // world
  int ranks = 1;
  std::string device = "cpu";
  std::string clock = "";  // "" = modeled on cpu/phantom, cuda on cuda
  std::string profile = "8xH100-NVLink";
  std::string capacity = "";  // per-rank memory capacity override, e.g. "2GiB"
  double comm_timeout = 30;
  std::string backend = "auto";  // not an option: "local" runs a comparison on this process alone
  std::string impl = "reference";
  // model
  int layers = 2;
  int dim = 64;
  int heads = 4;
  int seq = 32;
  std::string model = "";  // a preset (gpt2-small, ...) or a JSON file; "" = the options above
  int vocab = 0;           // 0 = what the task needs
  std::string tie_embeddings = "off";  // on | off; a preset's own unless typed (core/model/presets)
  // mixture of experts (GPTConfig's fields; 0 experts = dense)
  int experts = 0;
  int top_k = 1;
  int moe_every = 1;
  std::string capacity_factor = "dropless";  // a number > 0, or dropless
  double aux_loss_coef = 0.01;
  int expert_hidden = 0;  // not an option: a preset's or model file's (0 = 4 * dim)
  // A preset's or model file's block (GPT-2's by default); --kv-heads and --ffn-dim set two of
  // its fields.
  BlockStyle style;
  // training
  int steps = 150;
  int batch = 16;
  std::string task = "markov";
  std::string data_file = "";
  std::string optimizer = "adamw";
  double lr = 3e-3;
  double weight_decay = 0.01;  // AdamW: decoupled (PyTorch's default); SGD: L2 on the gradient
  uint64_t seed = 1234;
  std::string checkpoint = "";
  std::string resume = "";
  std::string precision = "fp32";  // fp32 | bf16 | fp16: storage type of weights and activations
  std::string recompute = "none";  // none | selective | full: activation checkpointing
  int checkpoint_every = 0;        // also write --checkpoint every N steps (0: at the end only)
  // injected faults (core/runtime/faults.h; "" / empty: none)
  std::vector<std::string> slow_rank;  // "R:F" or "R:F@S"
  std::vector<std::string> slow_link;  // "A-B:F"
  std::string jitter = "";             // percent
  std::string fail_rank = "";          // "R@S"
  // output
  std::string trace_path = "";
  bool viz = false;
  bool quiet = false;
  int log_every = 0;  // 0 = about 10 lines per run
  // Every option's resolved value (resolved_run_config): under mpirun the processes compare it.
  RunConfig run_config;

  WorldOptions world_options() const;  // validated; throws UsageError
  // The injected faults the options describe; throws UsageError (one line) for a malformed text
  // or F <= 0, and with `check` (the command line's, once) for a rank or step that does not
  // exist. A lesson's own comparison runs (one rank, fewer steps) keep the plan unchecked: a
  // fault on a rank or step they do not have never happens there.
  FaultPlan fault_plan(bool check = true) const;
  nlohmann::json to_json() const;
};

struct LessonDefaults {
  int ranks = 1;
  int steps = 150;
  int batch = 16;
  int layers = 2;
  bool model_options = true;  // lessons that train the GPT
};

class Lesson {
 public:
  virtual ~Lesson() = default;
  virtual std::string name() const = 0;
  virtual std::string summary() const = 0;
  virtual LessonDefaults defaults() const { return {}; }
  // Adds the lesson's own options to its command (the common ones are added for it).
  virtual void add_options(CLI::App& app) { (void)app; }
  // Runs the lesson; returns the process exit code. Throws UsageError for impossible configs.
  virtual int run(const CommonOptions& common, std::ostream& out) = 0;
};

// Every lesson, in teaching order.
std::vector<std::unique_ptr<Lesson>> all_lessons();

// Adds the shared options to a lesson's command, with the lesson's defaults.
void add_common_options(CLI::App& app, CommonOptions& common, const LessonDefaults& defaults);

// Under mpirun the world is the MPI job: every process is one rank, so --ranks becomes the MPI
// size (absent or equal to it; another value throws UsageError). `ranks_given`: the user typed
// --ranks. Without mpirun nothing changes.
void apply_mpi_world_size(CommonOptions& common, bool ranks_given);
// The one rule of which option shapes what: every option below sets a field a --model preset or
// file also sets, and a typed option overrides the model's value (as README says).
inline constexpr const char* kModelShapeOptions[] = {
    "--layers",         "--dim",      "--heads",  "--seq",       "--vocab",
    "--tie-embeddings", "--experts",  "--top-k",  "--moe-every", "--capacity-factor",
    "--aux-loss-coef",  "--kv-heads", "--ffn-dim"};
// --model NAME|FILE.json: fills the fields of kModelShapeOptions from a published preset or a
// file, except those the user typed (`given`: the option names used, e.g. "--layers"). Throws
// UsageError for an unknown preset or a bad file.
void apply_model_preset(CommonOptions& common, const std::vector<std::string>& given);

// The run configuration every process of an MPI job must share (WorldOptions::run_config): the
// lesson, then each of its command's options with the value it resolved to (typed or default),
// the model's dimensions after --model.
RunConfig resolved_run_config(const std::string& lesson, const CLI::App& app,
                              const CommonOptions& common);

// Launched by mpirun/srun (this process is one rank of a process world).
bool launched_by_mpi();
// The process that prints and writes files: always true without mpirun, world rank 0 under it.
bool root_process();

// "2GiB", "512MiB", "1e9" -> bytes; throws UsageError.
int64_t parse_bytes(const std::string& text);

}  // namespace mgpu::lessons
