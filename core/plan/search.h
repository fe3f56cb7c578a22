// The planner's search: which layout should this model use on N GPUs of this cluster?
//
//   enumerate  every layout the hybrid engine's rules allow: dp x tp x pp x cp = N (tp divides
//              the heads, the kv heads and the MLP width, pp's stages hold the layers evenly or
//              within 2%, cp's zigzag chunks split the sequence; a model with experts also an ep
//              dividing dp and the experts),
//              dp x micro-batches x micro-batch size = the global batch, each schedule, ZeRO
//              stage, recompute mode and precision -- minus what the user pinned;
//   screen     formulas pick WHICH layouts are worth simulating: a lower bound of the peak
//              memory (what the engine certainly holds at one moment; a layout over capacity by
//              it cannot fit) and an estimate of step time (roofline GEMMs, ring collectives,
//              the pipeline bubble) that only orders. Its numbers are never printed as a layout's
//              figures;
//   simulate   plan::simulate on the modeled clock gives every number that is shown, first on
//              the screen's picks, then on the neighbours of the fastest (refine.cpp) while they
//              are faster; layouts whose simulated peak memory exceeds the profile's capacity are
//              rejected.
// Options the engine refuses (its std::invalid_argument) are skipped with its reason, so they
// join the search on their own once the engine runs them.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/plan/simulate.h"

namespace mgpu::plan {

// What the user fixed; everything unset is searched.
struct Pins {
  std::optional<int> dp, tp, pp, cp, ep, microbatch_size, zero, virtual_stages;
  std::optional<std::string> schedule, recompute;
  // Megatron-LM's choices: unpinned, each is on wherever the engine runs it (with_megatron_choices)
  std::optional<bool> sp, vocab_head;
  // Precisions searched. Empty (the default): bf16, or fp32 with a note while the engine refuses
  // bf16. Otherwise exactly these (one pinned, or all three).
  std::vector<std::string> precisions;
};

struct SearchRequest {
  Workload workload;  // model.seq_len is the sequence length trained
  int gpus = 8;
  int global_batch = 512;  // sequences per step
  HardwareProfile profile;
  Pins pins;
  int top = 5;              // layouts shown
  int max_simulated = 8;    // layouts that fit by the screen, simulated in screen order (up
                            // to 3x as many while none of them fits the capacity), and as many
                            // neighbours of the fastest per move of the refinement (3x in all)
  int rejected_probes = 2;  // best layouts the screen finds over capacity, simulated for "why"
};

// The screen's formula figures for one candidate (selection only, never shown as its numbers).
struct Screen {
  double step_seconds = 0;
  int64_t memory_bytes = 0;  // per rank: a lower bound of the fullest stage's peak
};

struct Candidate {
  Layout layout;
  Screen screen;
};

// One simulated layout, with why it is not among the best when it is not.
struct Simulated {
  Layout layout;
  Prediction prediction;
  bool fits = true;  // memory_peak_total <= the profile's capacity
  std::string why;   // out of memory by how much, or what makes it slower than the best
};

struct SearchResult {
  std::vector<Simulated> ranked;    // fits, fastest first (tokens/s)
  std::vector<Simulated> rejected;  // over capacity, the fastest first
  // Layouts the engine refused without simulating, by its reason (each reason once).
  std::map<std::string, int> refused;
  std::map<std::string, Layout> refused_example;  // the first layout each reason refused
  int64_t enumerated = 0;                         // valid layouts
  int64_t screened_out = 0;  // over capacity by the formula (not simulated, except probes)
  int simulated = 0;         // plan::simulate calls that ran
  double wall_seconds = 0;
  std::vector<std::string> notes;  // e.g. a precision the engine refused and what was searched
};

// Every valid layout of `model` on `gpus` GPUs for `global_batch` sequences, honouring the pins.
// Throws std::invalid_argument (one line, naming values that would work) when none exists.
std::vector<Layout> enumerate_layouts(const GPTConfig& model, int gpus, int global_batch,
                                      const Pins& pins);

// The screen's estimate for one layout (formulas; see search.cpp).
Screen screen_layout(const GPTConfig& model, const Layout& layout, const HardwareProfile& profile);

using Simulator = std::function<Prediction(const Workload&, const Layout&, const HardwareProfile&)>;
// Progress of a long search, after each simulation: how many ran, how many are planned, which.
using Progress =
    std::function<void(int done, int planned, const Layout& layout, const Prediction& prediction)>;

// Enumerate, screen, simulate, rank. `simulator` is plan::simulate unless a test swaps it.
SearchResult search(const SearchRequest& request, const Progress& progress = {},
                    const Simulator& simulator = {});

// "dp 8 tp 8 pp 16 cp 1 mbs 1 M 24 1f1b zero 0 bf16 none" (with "ep 4" after cp when ep > 1).
std::string describe(const Layout& layout);

// The knobs of a search as the command line names them (--tp, --sp, ...): those the pins fix,
// with their values, those it searches, and those neither (their default values).
struct Knobs {
  std::vector<std::pair<std::string, std::string>> pinned;    // {"--tp", "4"}
  std::vector<std::string> searched;                          // {"--dp", ...}
  std::vector<std::pair<std::string, std::string>> defaults;  // {"--precision", "bf16"}
};
Knobs knobs(const Pins& pins);

}  // namespace mgpu::plan
