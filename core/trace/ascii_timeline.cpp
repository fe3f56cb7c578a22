#include "core/trace/ascii_timeline.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/trace/analysis.h"
#include "core/trace/ascii_timeline_internal.h"
#include "core/trace/expert_load.h"

namespace mgpu::trace {

using timeline_detail::format_duration;
using timeline_detail::Grid;
using timeline_detail::render_ruler;

namespace {

constexpr int kDefaultWidth = 100;
constexpr int kMinColumns = 10;
constexpr int kIdle = -1;  // owner of a cell no event claims

int resolve_width(int requested) {
  if (requested > 0) return requested;
  if (const char* columns = std::getenv("COLUMNS")) {
    const int from_env = std::atoi(columns);
    if (from_env >= 20) return from_env;
  }
  return kDefaultWidth;
}

bool resolve_colour(std::optional<bool> requested) {
  if (requested) return *requested;
  // Under mpirun a process's stdout is a pseudo-terminal of mpirun's even when mpirun's own output
  // goes to a file: there colour codes would land in the file, so plain text.
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  return std::getenv("NO_COLOR") == nullptr && !under_mpirun && isatty(STDOUT_FILENO);
}

// ---- How each kind of event looks ----
struct Look {
  char letter;
  const char* name;  // legend text
  const char* ansi;  // colour escape
};

// A comm event's waiting for a partner, [start, start + wait], is drawn apart from the rest of
// it (its wire time) as a piece of this category.
constexpr const char* kWaitPiece = "wait";

Look look_of(const Event& e) {
  if (e.lane == Lane::comm && e.cat == kWaitPiece)
    return {'~', "waiting for a partner", "\x1b[2;36m"};
  // An expert exchange's all-to-alls (expert parallelism labels them): tokens out to their
  // experts, and back.
  if (is_dispatch(e)) return {'>', "dispatch to experts", "\x1b[1;35m"};
  if (is_combine(e)) return {'<', "combine from experts", "\x1b[1;35m"};
  if (e.lane == Lane::comm) return {'=', "comm on the wire", "\x1b[1;36m"};
  if (e.cat == cat::forward) return {'F', "forward", "\x1b[30;42m"};
  if (e.cat == cat::backward) return {'B', "backward", "\x1b[97;44m"};
  if (e.cat == cat::backward_weight) return {'W', "weight grad", "\x1b[97;45m"};
  if (e.cat == cat::optimizer) return {'O', "optimizer", "\x1b[30;43m"};
  return {'C', "other compute", "\x1b[30;47m"};
}
constexpr const char* kReset = "\x1b[0m";
constexpr const char* kDim = "\x1b[2m";

std::vector<const Event*> events_on(const Trace& trace, int rank, Lane lane, Interval window) {
  std::vector<const Event*> out;
  for (const Event& e : trace.events) {
    if (e.rank == rank && e.lane == lane && e.end() > window.begin && e.start < window.end) {
      out.push_back(&e);
    }
  }
  return out;
}

// The comm events with their waiting split off as a piece of its own (kWaitPiece).
std::vector<Event> split_waits(const std::vector<const Event*>& events) {
  std::vector<Event> pieces;
  for (const Event* e : events) {
    pieces.push_back(*e);
    if (e->wait <= 0) continue;
    Event& wire = pieces.back();
    Event waiting = wire;
    waiting.cat = kWaitPiece;
    waiting.dur = e->wait;
    wire.start = e->start + e->wait;
    wire.dur = e->dur - e->wait;
    if (!(wire.dur > 0))
      wire = waiting;
    else
      pieces.push_back(std::move(waiting));
  }
  return pieces;
}

std::vector<const Event*> pointers_to(const std::vector<Event>& events) {
  std::vector<const Event*> out;
  for (const Event& e : events) out.push_back(&e);
  return out;
}

// Which event (index into `events`) each column shows.
std::vector<int> assign_cells(const std::vector<const Event*>& events, const Grid& g) {
  std::vector<int> owner(g.columns, kIdle);
  std::vector<double> best(g.columns, 0), covered(g.columns, 0);
  for (int i = 0; i < static_cast<int>(events.size()); ++i) {
    const double s = std::max(events[i]->start, g.window.begin);
    const double e = std::min(events[i]->end(), g.window.end);
    for (int c = g.column_of(s); c <= g.column_of(e); ++c) {
      const double cell_begin = g.window.begin + c * g.cell;
      const double overlap = std::min(e, cell_begin + g.cell) - std::max(s, cell_begin);
      if (overlap <= 0) continue;
      covered[c] += overlap;
      if (overlap > best[c]) best[c] = overlap, owner[c] = i;
    }
  }
  for (int c = 0; c < g.columns; ++c) {
    if (covered[c] < g.cell / 2) owner[c] = kIdle;
  }
  // Every event with a duration gets a cell: at its midpoint, or a neighbour, taken from idle
  // time or from an event that keeps at least one other cell.
  std::vector<int> cells_of(events.size(), 0);
  for (int o : owner)
    if (o != kIdle) ++cells_of[o];
  for (int i = 0; i < static_cast<int>(events.size()); ++i) {
    if (cells_of[i] > 0 || events[i]->dur <= 0) continue;
    const int mid = g.column_of(events[i]->start + events[i]->dur / 2);
    for (int c : {mid, mid + 1, mid - 1}) {
      if (c < 0 || c >= g.columns) continue;
      if (owner[c] != kIdle && cells_of[owner[c]] <= 1) continue;
      if (owner[c] != kIdle) --cells_of[owner[c]];
      owner[c] = i;
      ++cells_of[i];
      break;
    }
  }
  return owner;
}

// The padding after a label: the letter in lower case, so that back-to-back events of one kind
// still read apart ("F0fF1f", not "F0FF1F"); '=' stays '='.
char fill_of(char letter) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(letter)));
}

// The text of a run of `width` cells showing one event: its label, then the fill.
std::string run_text(const Event& e, int width, bool colour) {
  const Look look = look_of(e);
  std::string label(1, look.letter);
  if (e.lane == Lane::compute && e.microbatch >= 0) label += std::to_string(e.microbatch);
  if (static_cast<int>(label.size()) <= width) {
    return label + std::string(width - label.size(), fill_of(look.letter));
  }
  // Too narrow for the label: with colour the kind is visible already, so show the digit.
  if (width == 1 && colour && e.lane == Lane::compute && e.microbatch >= 0) {
    return std::string(1, label.back());
  }
  return look.letter + std::string(width - 1, fill_of(look.letter));
}

std::string render_row(const std::vector<const Event*>& events, const Grid& g,
                       const AsciiTimelineOptions& opt, bool colour) {
  const std::vector<int> owner = assign_cells(events, g);
  const std::string idle = opt.unicode ? "·" : ".";
  std::string row;
  for (int c = 0; c < g.columns;) {
    int end = c;
    while (end < g.columns && owner[end] == owner[c]) ++end;
    const int width = end - c;
    if (owner[c] == kIdle) {
      if (colour) row += kDim;
      for (int k = 0; k < width; ++k) row += idle;
    } else {
      const Event& e = *events[owner[c]];
      if (colour) row += look_of(e).ansi;
      row += run_text(e, width, colour);
    }
    if (colour) row += kReset;
    c = end;
  }
  return row;
}

std::string render_legend(const Trace& trace, const Grid& g, const AsciiTimelineOptions& opt,
                          bool colour) {
  std::map<char, Look> present;
  bool any_microbatch = false;
  for (const Event& e : trace.events) {
    if (e.lane == Lane::step) continue;
    present.emplace(look_of(e).letter, look_of(e));
    if (e.lane == Lane::comm && e.wait > 0) {
      Event waiting = e;
      waiting.cat = kWaitPiece;
      present.emplace('~', look_of(waiting));
    }
    any_microbatch |= e.lane == Lane::compute && e.microbatch >= 0;
  }
  std::string out;
  for (char letter : std::string("FBWOC=><~")) {
    auto it = present.find(letter);
    if (it == present.end()) continue;
    const Look& look = it->second;
    out += colour ? fmt::format("{}{}{} {}  ", look.ansi, letter, kReset, look.name)
                  : fmt::format("{} {}  ", letter, look.name);
  }
  out += fmt::format("{} idle\n", opt.unicode ? "·" : ".");
  if (any_microbatch) out += "F3 = forward of micro-batch 3; ";
  return out + fmt::format("1 char = {}\n", format_duration(g.cell));
}

std::string rank_label(int rank) {
  return fmt::format("GPU {}", rank);
}

}  // namespace

std::string render_ascii_timeline(const Trace& trace, const AsciiTimelineOptions& opt) {
  const Interval window = analysis_window(trace, opt.step);
  if (trace.num_ranks <= 0 || !(window.length() > 0)) return "(empty trace)\n";
  const bool colour = resolve_colour(opt.colour);
  const bool any_comm = std::any_of(trace.events.begin(), trace.events.end(),
                                    [](const Event& e) { return e.lane == Lane::comm; });

  const int label_width =
      static_cast<int>(rank_label(trace.num_ranks - 1).size() + std::string(" compute").size());
  Grid g;
  g.window = window;
  g.columns = std::max(kMinColumns, resolve_width(opt.width) - label_width - 1);
  g.cell = window.length() / g.columns;

  const std::string separator = opt.unicode ? "│" : "|";
  std::string out = render_ruler(g, label_width, opt);
  for (int rank = 0; rank < trace.num_ranks; ++rank) {
    const std::string compute_label = rank_label(rank) + " compute";
    out += fmt::format("{:<{}}{}{}\n", compute_label, label_width, separator,
                       render_row(events_on(trace, rank, Lane::compute, window), g, opt, colour));
    if (any_comm) {
      const std::string comm_label = std::string(rank_label(rank).size() + 1, ' ') + "comm";
      const std::vector<Event> pieces = split_waits(events_on(trace, rank, Lane::comm, window));
      out += fmt::format("{:<{}}{}{}\n", comm_label, label_width, separator,
                         render_row(pointers_to(pieces), g, opt, colour));
    }
  }
  if (opt.legend) out += render_legend(trace, g, opt, colour);
  return out;
}

}  // namespace mgpu::trace
