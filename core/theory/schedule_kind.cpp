// The schedule registry (see schedule_kind.h).
#include "core/theory/schedule_kind.h"

#include <array>
#include <stdexcept>

namespace mgpu::theory {

namespace {

using K = ScheduleKind;
constexpr std::array<ScheduleTraits, 8> kSchedules = {{
    // kind            name           split  V      bidir  V-arg  mesh
    {K::naive, "naive", false, false, false, false, false},
    {K::gpipe, "gpipe", false, false, false, false, true},
    {K::one_f_one_b, "1f1b", false, false, false, false, true},
    {K::interleaved, "interleaved", false, false, false, true, true},
    {K::zb_h1, "zb-h1", true, false, false, false, true},
    {K::zbv, "zbv", true, true, false, false, true},
    {K::dualpipev, "dualpipev", true, true, false, false, true},
    {K::dualpipe, "dualpipe", true, false, true, false, true},
}};

}  // namespace

std::span<const ScheduleTraits> all_schedules() {
  return kSchedules;
}

const ScheduleTraits& traits(ScheduleKind kind) {
  for (const ScheduleTraits& t : kSchedules)
    if (t.kind == kind) return t;
  throw std::logic_error("schedule registry: a kind without traits");
}

std::optional<ScheduleKind> find_schedule(std::string_view name) {
  for (const ScheduleTraits& t : kSchedules)
    if (name == t.name) return t.kind;
  return std::nullopt;
}

ScheduleKind schedule_kind(std::string_view name) {
  if (const auto kind = find_schedule(name)) return *kind;
  std::string names;
  for (const ScheduleTraits& t : kSchedules)
    names += std::string(names.empty() ? "" : ", ") + t.name;
  throw std::invalid_argument("unknown schedule '" + std::string(name) + "': one of " + names);
}

const char* schedule_name(ScheduleKind kind) {
  return traits(kind).name;
}

}  // namespace mgpu::theory
