// The MPI process's trace gather: every process's events and counters travel to rank 0 as JSON
// text, so the run's trace is one file as on the other backends.
#include <mpi.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/comm/mpi/mpi_comm.h"

namespace mgpu::comm::mpi {

namespace {

nlohmann::json event_to_json(const trace::Event& e) {
  return {{"name", e.name},    {"cat", e.cat},
          {"rank", e.rank},    {"lane", int(e.lane)},
          {"start", e.start},  {"dur", e.dur},
          {"wait", e.wait},    {"mb", e.microbatch},
          {"layer", e.layer},  {"chunk", e.chunk},
          {"step", e.step},    {"peer", e.peer},
          {"bytes", e.bytes},  {"sent_bytes", e.sent_bytes},
          {"flops", e.flops},  {"group", e.group},
          {"op", e.op},        {"seq", e.seq},
          {"counts", e.counts}};
}

trace::Event event_from_json(const nlohmann::json& j) {
  trace::Event e;
  e.name = j["name"];
  e.cat = j["cat"];
  e.rank = j["rank"];
  e.lane = static_cast<trace::Lane>(j["lane"].get<int>());
  e.start = j["start"];
  e.dur = j["dur"];
  e.wait = j["wait"];
  e.microbatch = j["mb"];
  e.layer = j["layer"];
  e.chunk = j["chunk"];
  e.step = j["step"];
  e.peer = j["peer"];
  e.bytes = j["bytes"];
  e.sent_bytes = j["sent_bytes"];
  e.flops = j["flops"];
  e.group = j["group"];
  e.op = j["op"];
  e.seq = j["seq"];
  e.counts = j["counts"].get<std::vector<int64_t>>();
  return e;
}

}  // namespace

void gather_trace_to_root(const trace::Trace& mine, trace::Trace& root_out) {
  nlohmann::json j = {{"events", nlohmann::json::array()}, {"counters", nlohmann::json::array()}};
  for (const auto& e : mine.events) j["events"].push_back(event_to_json(e));
  for (const auto& c : mine.counters)
    j["counters"].push_back({{"rank", c.rank}, {"time", c.time}, {"bytes", c.bytes}});
  std::string text = j.dump();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(size), displs(size);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[r] = total;
    total += lengths[r];
  }
  std::string all(rank == 0 ? total : 0, '\0');
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  if (rank != 0) return;
  for (int r = 0; r < size; ++r) {
    auto part = nlohmann::json::parse(all.substr(displs[r], lengths[r]));
    for (const auto& e : part["events"]) root_out.events.push_back(event_from_json(e));
    for (const auto& c : part["counters"]) {
      trace::CounterSample s;
      s.rank = c["rank"];
      s.time = c["time"];
      s.bytes = c["bytes"].get<std::array<int64_t, 6>>();
      root_out.counters.push_back(s);
    }
  }
}

}  // namespace mgpu::comm::mpi
