// Building trace events by hand for analysis, reader/writer and dashboard tests.
#pragma once
#include <string>
#include <utility>

#include "core/runtime/trace_event.h"

namespace mgpu::testing {

inline trace::Event make_event(std::string name, std::string category, int rank, trace::Lane lane,
                               double start, double dur) {
  trace::Event e;
  e.name = std::move(name);
  e.cat = std::move(category);
  e.rank = rank;
  e.lane = lane;
  e.start = start;
  e.dur = dur;
  return e;
}

}  // namespace mgpu::testing
