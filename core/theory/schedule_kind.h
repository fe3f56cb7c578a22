// The pipeline schedules as a registry: a kind and its traits. Names are spelled only here (and
// where the CLI and files parse or print them, through find_schedule / schedule_name); every rule
// elsewhere asks a kind's traits instead of comparing names. A leaf, like the rest of theory/:
// the generators live in core/parallel/pipeline and are chosen by kind there.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace mgpu::theory {

enum class ScheduleKind { naive, gpipe, one_f_one_b, interleaved, zb_h1, zbv, dualpipev, dualpipe };

struct ScheduleTraits {
  ScheduleKind kind;
  const char* name;           // the CLI's and the trace's spelling
  bool splits_backward;       // zero-bubble's B and W (an MoE block cannot be split)
  bool v_shape;               // two chunks per stage in a V (ZB-V, DualPipeV)
  bool bidirectional;         // DualPipe: two copies of the model, one per direction
  bool takes_virtual_stages;  // --virtual-stages V chunks per stage (interleaved)
  bool runs_on_mesh;          // the hybrid mesh and the planner run it (all but naive)
};

// Every schedule, in the order the CLI lists them.
std::span<const ScheduleTraits> all_schedules();
const ScheduleTraits& traits(ScheduleKind kind);
std::optional<ScheduleKind> find_schedule(std::string_view name);
// find_schedule, or std::invalid_argument naming the schedules there are.
ScheduleKind schedule_kind(std::string_view name);
const char* schedule_name(ScheduleKind kind);

}  // namespace mgpu::theory
