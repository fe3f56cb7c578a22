// Exercise 01's checks with a diagnosis: runs an all-reduce on rank threads, each rank's comm
// watched (ring_watch.h), and when the result is wrong (or the comm layer stops it) says which
// message of each rank left the page's ring: phase, step, the chunk it covered and the chunk the
// ring uses there. The graded test passes the installed all-reduce; test_grade_cli passes rings
// with deliberate bugs and checks that the messages name them.
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/collective_reference.h"
#include "core/comm/comm.h"
#include "core/comm/seams.h"
#include "core/world/world.h"
#include "grade/grade_support.h"
#include "grade/ring_watch.h"

namespace mgpu::grade {

namespace ring_detail {

// Whether message m is the k-th send (or receive) of rank r on the page's ring: the right peer
// and the step's chunk (a temporary of the chunk's length counts: what is added where is
// invisible to the comm; an empty message matches an empty chunk wherever it points).
inline bool on_ring(const RingMessage& m, bool send, int k, int r, int ranks, int64_t n) {
  const int peer = send ? (r + 1) % ranks : (r - 1 + ranks) % ranks;
  if (m.peer != peer) return false;
  auto [begin, end] = comm::chunk_range(n, ranks, ring_step(send, k, r, ranks).chunk);
  if (m.length != end - begin) return false;
  return !m.inside || m.length == 0 || m.begin == begin;
}

inline std::string verb(const RingMessage& m) {
  if (m.call == "recv_reduce") return "received and added into";
  return m.call.find("send") != std::string::npos ? "sent" : "received into";
}

// What the ring does at the k-th send (receive) of rank r: "the ring sends chunk r-s = 3
// (elements 750..1000) to rank 2 at this step".
inline std::string ring_does(bool send, int k, int r, int ranks, int64_t n) {
  const RingStep s = ring_step(send, k, r, ranks);
  auto [begin, end] = comm::chunk_range(n, ranks, s.chunk);
  const char* does = send ? "sends" : s.reduce_scatter ? "adds into" : "receives";
  return fmt::format("the ring {} chunk {} = {} (elements {}..{}) {} rank {} at this step", does,
                     s.rule(), s.chunk, begin, end, send ? "to" : "from",
                     send ? (r + 1) % ranks : (r - 1 + ranks) % ranks);
}

// The first of `messages` (rank r's sends or receives) off the ring: its index and one line.
inline std::optional<std::pair<size_t, std::string>> first_off(
    const std::vector<RingMessage>& messages, bool send, int r, int ranks, int64_t n) {
  const size_t ring = 2 * static_cast<size_t>(ranks - 1);
  for (size_t k = 0; k < messages.size(); ++k) {
    const RingMessage& m = messages[k];
    const std::string what = fmt::format(
        "{} {} {} rank {}", verb(m), describe_elements(m, n, ranks), send ? "to" : "from", m.peer);
    if (k >= ring)
      return std::pair{k, fmt::format("rank {}, after the last step: {} ({} #{}; the ring has {} "
                                      "= 2(N-1))",
                                      r, what, send ? "send" : "receive", k + 1, ring)};
    if (!on_ring(m, send, static_cast<int>(k), r, ranks, n))
      return std::pair{k, fmt::format("rank {}, {}: {}; {}", r,
                                      ring_step(send, static_cast<int>(k), r, ranks).where(), what,
                                      ring_does(send, static_cast<int>(k), r, ranks, n))};
  }
  return std::nullopt;
}

}  // namespace ring_detail

// Each rank's first message off the page's ring (the earlier of its first wrong send and first
// wrong receive; both when they are at the same step), one line each; with `complete` (the
// all-reduce returned on every rank) also the ranks that sent or received too few. "" when every
// message is on the ring.
inline std::string ring_diagnosis(const std::vector<RingLog>& logs, int64_t n, bool complete) {
  const int ranks = static_cast<int>(logs.size());
  const size_t ring = 2 * static_cast<size_t>(ranks - 1);
  std::vector<std::string> lines;
  for (int r = 0; r < ranks; ++r) {
    auto send = ring_detail::first_off(logs[r].sends, true, r, ranks, n);
    auto recv = ring_detail::first_off(logs[r].recvs, false, r, ranks, n);
    if (send && (!recv || send->first <= recv->first)) lines.push_back(send->second);
    if (recv && (!send || recv->first <= send->first)) lines.push_back(recv->second);
    if (send || recv || !complete) continue;
    if (logs[r].sends.size() < ring || logs[r].recvs.size() < ring)
      lines.push_back(
          fmt::format("rank {}: {} sends and {} receives; the ring has {} of each "
                      "(2(N-1): N-1 steps of reduce-scatter, N-1 of all-gather)",
                      r, logs[r].sends.size(), logs[r].recvs.size(), ring));
  }
  if (lines.empty()) return "";
  std::string text = fmt::format(
      "off the page's ring, each rank's first message that differs (N={} ranks, {} element{}; "
      "elements a..b are a to b-1):",
      ranks, n, n == 1 ? "" : "s");
  for (auto& line : lines) text += "\n  " + line;
  return text;
}

// The installed all-reduce (or `all_reduce`) on `ranks` rank threads of rank_input, each with a
// watched comm; "" when every rank holds the serial result. Otherwise the first wrong element (or
// the error that stopped the run) and the ring diagnosis. An error with every message on the ring
// (a stub's NotImplemented) is rethrown as it is.
inline std::string ring_all_reduce_failure(const comm::AllReduceFn& all_reduce, int ranks,
                                           int64_t n, comm::ReduceOp op) {
  World world(local_world(ranks));
  std::vector<RingLog> logs(ranks);
  std::vector<std::vector<float>> got(ranks);
  std::exception_ptr error;
  std::string what;
  try {
    world.run([&](RankContext& ctx) {
      Tensor t = Tensor::from({n}, testing::rank_input(ctx.rank, n));
      RingWatch watch(*ctx.comm, t, logs[ctx.rank]);
      all_reduce(watch, t, op);
      got[ctx.rank] = t.to_vector();
    });
  } catch (const std::exception& e) {
    error = std::current_exception();
    what = e.what();
  }
  const std::string off = ring_diagnosis(logs, n, !error);
  if (error && off.empty()) std::rethrow_exception(error);
  if (error) return fmt::format("your all-reduce stopped: {}\n{}", what, off);
  const auto want = testing::serial_reduce(ranks, n, op);
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[r][i] == Catch::Detail::Approx(want[i])) continue;
      return fmt::format(
          "rank {} element {}: got {} but the {} over the ranks is {}\n{}", r, i, got[r][i],
          op == comm::ReduceOp::avg ? "mean" : "sum", want[i],
          off.empty() ? "every message is on the page's ring: look at what is done with them "
                        "(the add, avg's division, a temporary added into the wrong chunk)"
                      : off);
    }
  return "";
}

}  // namespace mgpu::grade
