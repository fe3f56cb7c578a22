// A per-rank timeline as text, for terminals, lesson output and test logs:
//
//   time (ms)     0         0.5       1         1.5
//                 +---------+---------+---------+-----
//   GPU 0 compute|F0F1fF2F3f.........B0bbbF4fB1bbbF5.B2bbb...
//         comm   |....=.....=.....=.....=..........
//   GPU 1 compute|...F0fF1F2.....B0bbbF3fB1bbbF4fB2bbb...
//   F forward  B backward  W weight grad  O optimizer  C other compute  = comm on the wire
//   ~ waiting for a partner  . idle
//   F3 = micro-batch 3; 1 char = 25 us
//
// Cells are proportional to time; a cell shows the event covering most of it (idle when nothing
// covers half of it), and every event of non-zero length gets at least one cell. A run of cells
// of one event starts with its label (kind letter + micro-batch) where it fits, then the letter in
// lower case, so back-to-back events of one kind still read apart. A comm event's waiting for a
// partner (Event::wait, drawn first) shows as '~', its wire time as '='; an expert exchange's
// all-to-alls (core/trace/expert_load.h) as '>' (dispatch) and '<' (combine) instead of '='.
#pragma once
#include <optional>
#include <string>

#include "core/runtime/trace_event.h"

namespace mgpu::trace {

struct AsciiTimelineOptions {
  int width = 0;               // whole line width; 0 = $COLUMNS, else 100
  bool unicode = false;        // '·' for idle and box-drawing ruler/separators
  std::optional<bool> colour;  // ANSI colours; unset = when stdout is a terminal
  std::optional<int> step;     // draw only this step's window (see analysis.h)
  bool legend = true;
};

std::string render_ascii_timeline(const Trace& trace, const AsciiTimelineOptions& options = {});

}  // namespace mgpu::trace
