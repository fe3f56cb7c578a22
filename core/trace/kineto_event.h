// Internal to the Kineto reader: one trace event's fields as the streaming parser meets them, and
// what the reader keeps of a finished event (kineto_classify.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "core/trace/kineto_raw.h"

namespace mgpu::trace::kineto {

// One JSON scalar as a SAX callback gives it.
struct Scalar {
  enum class Kind { other, number, text };
  Kind kind = Kind::other;
  double number = 0;
  int64_t integer = -1;   // the number when it is integral, else -1
  std::string_view text;  // valid during the callback only
};

struct EventRecord {
  int64_t index = 0;  // in traceEvents
  std::string ph, cat, name, pid, tid;
  bool has_ts = false, has_dur = false;
  double ts = 0, dur = 0;
  // args the reader uses (-1 / empty when absent)
  int64_t correlation = -1, in_nelems = -1, total_allocated = -1, device_type = -1;
  std::string dtype, collective, group;

  // Field by field, so the strings keep their capacity: one record serves a whole file.
  void clear() {
    for (std::string* s : {&ph, &cat, &name, &pid, &tid, &dtype, &collective, &group}) s->clear();
    has_ts = has_dur = false;
    ts = dur = 0;
    correlation = in_nelems = total_allocated = device_type = -1;
  }
};

void read_event_field(std::string_view key, const Scalar& value, EventRecord& e,
                      const RawRank& file);
void read_event_arg(std::string_view key, const Scalar& value, EventRecord& e);
// Keeps what the reader maps (see kineto_reader.h) of a finished event in `file`.
void classify_event(const EventRecord& e, RawRank& file);

// "(Kineto reader limits: ...)": appended to every error so the user knows what would work.
std::string kineto_limits_note();
[[noreturn]] void fail_event(const RawRank& file, const EventRecord& e, const char* field,
                             const std::string& what);

}  // namespace mgpu::trace::kineto
