// The schedule validator. Checks go from local to global: fields in range, then per stage and
// chunk the compute bookkeeping (F, B or B+W once each, in that order), then each compute's
// messages on the same stage, then send/recv pairing across stages, and last a dry run that
// finds circular waits. All problems are reported, one per line.
#include "core/parallel/pipeline/validator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (moved here in fmt 11)

#include <deque>
#include <map>
#include <set>

namespace mgpu::pipeline {

namespace {

struct Problems {
  std::vector<std::string> lines;
  template <typename... Args>
  void add(fmt::format_string<Args...> format, Args&&... args) {
    lines.push_back(fmt::format(format, std::forward<Args>(args)...));
  }
};

std::string label(int microbatch, int chunk) {
  return chunk > 0 ? fmt::format("{}c{}", microbatch, chunk) : fmt::format("{}", microbatch);
}

std::string blocked_at(const Action& a) {
  return fmt::format("{} mb{} from stage {}", kind_name(a.kind), label(a.microbatch, a.chunk),
                     a.peer);
}

bool fields_in_range(const Schedule& s, int stage, const Action& a, Problems& problems) {
  const bool comm = is_communication(a.kind);
  if (a.microbatch < 0 || a.microbatch >= s.microbatches || a.chunk < 0 ||
      a.chunk >= s.virtual_stages || !s.carries(a.chunk, a.microbatch) ||
      (comm && (a.peer < 0 || a.peer >= s.stages))) {
    problems.add("stage {}: {} is out of range (M={}, V={}, P={})", stage, a.str(), s.microbatches,
                 s.virtual_stages, s.stages);
    return false;
  }
  return true;
}

// Per stage and chunk: F once, then either B once or B(input) once followed by W once.
void check_compute(const Schedule& s, int stage, Problems& problems) {
  // position of each compute action, by (kind, microbatch, chunk); -1 = absent
  std::map<std::tuple<ActionKind, int, int>, int> seen;
  const auto& list = s.actions[stage];
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const Action& a = list[i];
    if (!is_compute(a.kind)) continue;
    if (!seen.emplace(std::tuple{a.kind, a.microbatch, a.chunk}, i).second)
      problems.add("stage {}: {} appears twice", stage, a.str());
  }
  auto where = [&](ActionKind kind, int mb, int chunk) {
    auto it = seen.find({kind, mb, chunk});
    return it == seen.end() ? -1 : it->second;
  };
  for (int chunk = 0; chunk < s.virtual_stages; ++chunk) {
    for (int mb = 0; mb < s.microbatches; ++mb) {
      if (!s.carries(chunk, mb)) continue;
      const std::string name = label(mb, chunk);
      const std::string where_chunk = s.virtual_stages > 1 ? fmt::format(" chunk {}", chunk) : "";
      const int f = where(ActionKind::forward, mb, chunk);
      const int b = where(ActionKind::backward, mb, chunk);
      const int bi = where(ActionKind::backward_input, mb, chunk);
      const int w = where(ActionKind::backward_weight, mb, chunk);
      if (f < 0) problems.add("stage {}: micro-batch {}{} has no forward", stage, mb, where_chunk);
      if (b < 0 && bi < 0)
        problems.add("stage {}: micro-batch {}{} has no backward", stage, mb, where_chunk);
      if (b >= 0 && (bi >= 0 || w >= 0))
        problems.add("stage {}: micro-batch {} has both a full backward and a split B/W", stage,
                     name);
      if (bi >= 0 && w < 0) problems.add("stage {}: B{} has no W{}", stage, name, name);
      if (w >= 0 && bi < 0 && b < 0) problems.add("stage {}: W{} has no B{}", stage, name, name);
      const int first_backward = b >= 0 ? b : bi;
      if (f >= 0 && first_backward >= 0 && first_backward < f)
        problems.add("stage {}: B{} appears before F{}", stage, name, name);
      if (bi >= 0 && w >= 0 && w < bi)
        problems.add("stage {}: W{} appears before B{}", stage, name, name);
    }
  }
}

// Each compute gets its inputs through a recv earlier on the same stage (from the stage owning
// the neighbouring virtual stage) and hands its output on with a send after it.
void check_dependencies(const Schedule& s, int stage, Problems& problems) {
  const auto& list = s.actions[stage];
  const int last = s.num_virtual_stages() - 1;
  std::map<std::tuple<ActionKind, int, int>, int> position;
  for (int i = 0; i < static_cast<int>(list.size()); ++i)
    position.emplace(std::tuple{list[i].kind, list[i].microbatch, list[i].chunk}, i);
  auto find = [&](ActionKind kind, const Action& a) {
    auto it = position.find({kind, a.microbatch, a.chunk});
    return it == position.end() ? -1 : it->second;
  };
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const Action& a = list[i];
    const int v = s.virtual_stage(stage, a.chunk);
    const bool is_fwd = a.kind == ActionKind::forward;
    const bool is_bwd = a.kind == ActionKind::backward || a.kind == ActionKind::backward_input;
    if ((is_fwd && v > 0) || (is_bwd && v < last)) {
      const ActionKind recv = is_fwd ? ActionKind::recv_activation : ActionKind::recv_grad;
      const int r = find(recv, a);
      if (r < 0 || r > i)
        problems.add("stage {}: {} has no {} before it (its input comes from stage {})", stage,
                     a.str(), kind_name(recv), s.neighbour(stage, a.chunk, is_fwd ? -1 : +1).first);
    }
    if ((is_fwd && v < last) || (is_bwd && v > 0)) {
      const ActionKind send = is_fwd ? ActionKind::send_activation : ActionKind::send_grad;
      const int snd = find(send, a);
      if (snd < 0 || snd < i)
        problems.add("stage {}: {} is not followed by its {}", stage, a.str(), kind_name(send));
    }
    if (is_communication(a.kind)) {
      // The peer must own the neighbouring virtual stage.
      const bool towards_next =
          a.kind == ActionKind::send_activation || a.kind == ActionKind::recv_grad;
      const int neighbour = towards_next ? v + 1 : v - 1;
      if (neighbour < 0 || neighbour > last ||
          a.peer != s.neighbour(stage, a.chunk, towards_next ? +1 : -1).first)
        problems.add("stage {}: {} talks to the wrong stage", stage, a.str());
    }
  }
}

// Every send is consumed by exactly one recv and every recv has its send.
void check_pairing(const Schedule& s, Problems& problems) {
  std::map<MessageKey, int> balance;  // +1 per send, -1 per recv
  std::map<MessageKey, std::pair<int, Action>> example;
  for (int stage = 0; stage < s.stages; ++stage)
    for (const Action& a : s.actions[stage])
      if (auto key = message_key(s, stage, a)) {
        const bool send = a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad;
        balance[*key] += send ? 1 : -1;
        example.emplace(*key, std::pair{stage, a});
      }
  for (const auto& [key, count] : balance) {
    const auto& [stage, a] = example.at(key);
    if (count > 0) problems.add("stage {}: {} has no matching recv", stage, a.str());
    if (count < 0) problems.add("stage {}: {} has no matching send", stage, a.str());
  }
}

}  // namespace

std::string find_deadlock(const Schedule& s) {
  std::map<MessageKey, int> mailbox;  // messages sent and not yet received
  std::vector<size_t> next(s.stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int stage = 0; stage < s.stages; ++stage) {
      const auto& list = s.actions[stage];
      while (next[stage] < list.size()) {
        const Action& a = list[next[stage]];
        const bool recv = a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_grad;
        if (auto key = message_key(s, stage, a)) {
          if (recv) {
            if (mailbox[*key] == 0) break;  // blocked: the message is not there yet
            --mailbox[*key];
          } else {
            ++mailbox[*key];  // buffered send: never blocks
          }
        }
        ++next[stage];
        progress = true;
      }
    }
  }
  std::vector<std::string> blocked;
  for (int stage = 0; stage < s.stages; ++stage)
    if (next[stage] < s.actions[stage].size())
      blocked.push_back(
          fmt::format("stage {} blocked at {}", stage, blocked_at(s.actions[stage][next[stage]])));
  return blocked.empty() ? "" : fmt::format("deadlock: {}", fmt::join(blocked, "; "));
}

ValidationResult validate_schedule(const Schedule& s) {
  Problems problems;
  if (s.stages < 1 || s.microbatches < 1 || s.virtual_stages < 1 ||
      static_cast<int>(s.actions.size()) != s.stages)
    return {false,
            fmt::format("schedule '{}' is malformed: P={}, M={}, V={}, {} action lists", s.name,
                        s.stages, s.microbatches, s.virtual_stages, s.actions.size())};
  bool in_range = true;
  for (int stage = 0; stage < s.stages; ++stage)
    for (const Action& a : s.actions[stage]) in_range &= fields_in_range(s, stage, a, problems);
  if (in_range) {
    for (int stage = 0; stage < s.stages; ++stage) {
      check_compute(s, stage, problems);
      check_dependencies(s, stage, problems);
    }
    check_pairing(s, problems);
    if (auto deadlock = find_deadlock(s); !deadlock.empty()) problems.lines.push_back(deadlock);
  }
  return {problems.lines.empty(), fmt::format("{}", fmt::join(problems.lines, "\n"))};
}

void check_schedule(const Schedule& schedule) {
  if (auto result = validate_schedule(schedule); !result.ok)
    throw ScheduleError(fmt::format("invalid {} schedule:\n{}", schedule.name, result.message));
}

}  // namespace mgpu::pipeline
