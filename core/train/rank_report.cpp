#include "core/train/rank_report.h"

#include <nlohmann/json.hpp>

#include "core/comm/comm.h"
#include "core/runtime/trace_event.h"

namespace mgpu {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(MemoryStats, current, peak, window_peak, total, peak_total,
                                   capacity)
namespace data {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Batch, B, T, tokens, targets)
}
}  // namespace mgpu

namespace mgpu::train {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StageFigures, pp, layers, peak_stashed, stash_bytes,
                                   peak_activation_bytes, gradient_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ZeroFigures, largest_unit)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(DdpFigures, buckets, last_shard)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StoreFigures, flushed_to_zero, unchecked)

namespace {

template <typename T>
void put(nlohmann::json& j, const char* key, const std::optional<T>& value) {
  if (value) j[key] = *value;
}

template <typename T>
void take(const nlohmann::json& j, const char* key, std::optional<T>& value) {
  if (j.contains(key)) value = j.at(key).get<T>();
}

}  // namespace

RankReport measured_report(RankContext& ctx) {
  RankReport r{.rank = ctx.rank,
               .memory = ctx.allocator.stats(),
               .compute_seconds = ctx.clock.compute_now()};
  for (const trace::Event& e : ctx.tracer.events())
    if (e.cat == trace::cat::recompute) r.recompute_seconds += e.dur;
  return r;
}

std::vector<RankReport> gather_reports(comm::Comm& comm, const RankReport& mine, int tag) {
  if (comm.rank() != 0) {
    comm::send_values(comm, encode(mine), 0, tag);
    return {};
  }
  std::vector<RankReport> all{mine};
  for (int r = 1; r < comm.size(); ++r)
    all.push_back(decode_rank_report(comm::recv_values<uint8_t>(comm, r, tag)));
  return all;
}

// MessagePack keeps the doubles' bits (a JSON text would round them).
std::vector<uint8_t> encode(const RankReport& r) {
  nlohmann::json j = {{"rank", r.rank},
                      {"memory", r.memory},
                      {"compute_seconds", r.compute_seconds},
                      {"recompute_seconds", r.recompute_seconds},
                      {"params_held", r.params_held},
                      {"params_updated", r.params_updated}};
  put(j, "stage", r.stage);
  put(j, "zero", r.zero);
  put(j, "ddp", r.ddp);
  put(j, "stores", r.stores);
  return nlohmann::json::to_msgpack(j);
}

RankReport decode_rank_report(const std::vector<uint8_t>& bytes) {
  const nlohmann::json j = nlohmann::json::from_msgpack(bytes);
  RankReport r;
  j.at("rank").get_to(r.rank);
  j.at("memory").get_to(r.memory);
  j.at("compute_seconds").get_to(r.compute_seconds);
  j.at("recompute_seconds").get_to(r.recompute_seconds);
  j.at("params_held").get_to(r.params_held);
  j.at("params_updated").get_to(r.params_updated);
  take(j, "stage", r.stage);
  take(j, "zero", r.zero);
  take(j, "ddp", r.ddp);
  take(j, "stores", r.stores);
  return r;
}

}  // namespace mgpu::train
