// The search's refinement: the screen's time is a formula and only orders what gets simulated, so
// the fastest layout the screen's first picks found is a starting point, not the answer. Its
// neighbours (the same run with one knob moved) are simulated in screen order; the first that is
// faster becomes the new best and its neighbours are tried in turn, until none is faster or the
// budget is spent (hill climbing on the simulated step time).
#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/plan/search_internal.h"

namespace mgpu::plan::detail {

namespace {

// The refinement's simulations in all, in budgets (one budget per move).
constexpr int kMoves = 3;

// Two meshes one move apart: a factor moved from one axis of dp, tp, pp, cp to another (their
// product, the GPU count, is the same), ep unchanged; or only ep changed.
bool one_mesh_move(const Layout& a, const Layout& b) {
  const std::array<int, 4> x{a.dp, a.tp, a.pp, a.cp}, y{b.dp, b.tp, b.pp, b.cp};
  int changed = 0;
  for (size_t i = 0; i < x.size(); ++i) changed += x[i] != y[i] ? 1 : 0;
  if (changed == 0) return a.ep != b.ep;
  return changed == 2 && a.ep == b.ep;
}

// The knobs `b` moves from `a`, one bit each (0: none, or unrelated: another precision, or a mesh
// more than one move away): the mesh (one move; where either side has one stage its schedule may
// differ too, since one stage runs only 1f1b), the schedule (with its V), the micro-batch size,
// the ZeRO stage and the recompute mode. The micro-batch count follows the others (the global
// batch is fixed); sequence parallelism and the vocabulary head follow the mesh.
enum Knob : unsigned { kMesh = 1, kSchedule = 2, kMicrobatch = 4, kZero = 8, kRecompute = 16 };

unsigned knobs_moved(const Layout& a, const Layout& b) {
  if (a.precision != b.precision) return 0;
  const bool mesh = a.dp != b.dp || a.tp != b.tp || a.pp != b.pp || a.cp != b.cp || a.ep != b.ep;
  if (mesh && !one_mesh_move(a, b)) return 0;
  const bool schedule = (a.schedule != b.schedule || a.virtual_stages != b.virtual_stages) &&
                        !(mesh && (a.pp == 1 || b.pp == 1));
  return (mesh ? kMesh : 0) | (schedule ? kSchedule : 0) |
         (a.microbatch_size != b.microbatch_size ? kMicrobatch : 0) |
         (a.zero != b.zero ? kZero : 0) | (a.recompute != b.recompute ? kRecompute : 0);
}

// `b` is `a` with less memory by one knob: a smaller micro-batch (more of them) or a stronger
// recompute mode, everything else the same.
bool lighter(const Layout& a, const Layout& b) {
  auto strength = [](const std::string& r) { return r == "none" ? 0 : r == "selective" ? 1 : 2; };
  switch (knobs_moved(a, b)) {  // exactly one knob: every other one is the same
    case kMicrobatch:
      return b.microbatch_size < a.microbatch_size;
    case kRecompute:
      return strength(b.recompute) > strength(a.recompute);
    default:
      return false;
  }
}

}  // namespace

void refine_best(SimulationRuns& runs, const std::vector<Candidate>& fits, int budget,
                 int planned) {
  int spent = 0, spent_in_all = 0;
  // Simulates `c`; true when it fits and beats `to_beat`.
  auto beats = [&](const Candidate& c, double to_beat) {
    if (spent >= budget || spent_in_all >= kMoves * budget || !runs.simulate(c.layout, planned))
      return false;
    ++spent;
    ++spent_in_all;
    const Simulated& s = runs.simulated().back();
    return s.fits && s.prediction.tokens_per_s > to_beat;
  };
  // The neighbours `moves` knobs away, each kind of move (which knobs) in screen order, the kinds
  // taken in turn: the first candidate of each kind, then the second of each, ... so that a dozen
  // schedule variants do not spend the budget before the micro-batch size is tried.
  auto neighbours = [&](const Layout& from, int moves) {
    std::map<unsigned, std::vector<const Candidate*>> by_kind;
    for (const Candidate& c : fits) {
      const unsigned moved = knobs_moved(from, c.layout);
      if (std::popcount(moved) == moves && !runs.ran(c.layout)) by_kind[moved].push_back(&c);
    }
    std::vector<const Candidate*> order;
    for (size_t i = 0; order.size() < fits.size(); ++i) {
      bool any = false;
      for (const auto& [kind, list] : by_kind)
        if (i < list.size()) order.push_back(list[i]), any = true;
      if (!any) break;
    }
    return order;
  };
  auto improves = [&](const Layout& from, int moves, double to_beat) {
    for (const Candidate* c : neighbours(from, moves)) {
      if (spent >= budget || spent_in_all >= kMoves * budget) return false;
      if (runs.ran(c->layout)) continue;
      if (beats(*c, to_beat)) return true;
      // Faster but over capacity (the screen's bound is below the peak): its first lighter
      // neighbour in screen order may keep most of the speed and fit.
      const Simulated& s = runs.simulated().back();
      if (s.fits || s.prediction.tokens_per_s <= to_beat ||
          layout_key(s.layout) != layout_key(c->layout))
        continue;
      const auto repair = std::find_if(fits.begin(), fits.end(), [&](const Candidate& r) {
        return !runs.ran(r.layout) && lighter(c->layout, r.layout);
      });
      if (repair != fits.end() && beats(*repair, to_beat)) return true;
    }
    return false;
  };
  // One knob at a time first; two together only where no single move helps (a smaller micro-batch
  // may pay only under another schedule).
  for (const Simulated* best = runs.best(); best; best = runs.best()) {
    spent = 0;  // each move has the budget again
    const Layout from = best->layout;
    const double to_beat = best->prediction.tokens_per_s;
    if (!improves(from, 1, to_beat) && !improves(from, 2, to_beat)) return;
  }
}

}  // namespace mgpu::plan::detail
