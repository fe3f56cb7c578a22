// Every collective and a ring of point-to-point messages once, from one rank of a group, with
// lengths that need not divide the group: the script the trace tests run on each backend (the
// local backend on the CPU, NCCL on GPUs), and what each call's trace event must say by the
// shared rules (algorithms/sent_bytes.h, cost_model.h). Call k starts at `first_start + k` on
// the modeled clock, later by `stagger` x its world rank on each member (0: all together).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/algorithms/sent_bytes.h"
#include "core/comm/comm.h"
#include "core/comm/cost_model.h"
#include "core/runtime/context.h"

namespace mgpu::testing {

struct ScriptedCall {
  std::string op;
  std::string group;
  double start = 0;         // when this member starts it (modeled clock)
  int64_t bytes = 0;        // the trace event's bytes
  int64_t sent_bytes = 0;   // by the shared rule
  int64_t seq = -1;         // the group's collective number (-1: point-to-point)
  int peer = -1;            // point-to-point: the partner's world rank
  double modeled_dur = -1;  // by the cost model from the members' starts (-1: not exact)
};

// The calls this rank makes on `comm` (group `group_seq0`: the group's next collective number).
inline std::vector<ScriptedCall> run_every_collective(RankContext& ctx, comm::Comm& comm, int64_t n,
                                                      double first_start, int64_t group_seq0,
                                                      double stagger = 0) {
  namespace alg = comm::algorithms;
  const int size = comm.size(), r = comm.rank();
  std::vector<int> members(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) members[i] = comm.world_rank(i);
  std::vector<ScriptedCall> calls;
  int64_t seq = group_seq0;
  double base = first_start;  // the call's instant before the stagger
  auto start_of = [&](int group_rank) { return base + stagger * comm.world_rank(group_rank); };
  auto start_next = [&] {
    base = first_start + static_cast<double>(calls.size());
    const double at = start_of(r);
    ctx.clock.wait_compute_until(at);
    ctx.clock.wait_comm_until(at);
    return at;
  };
  auto collective = [&](const char* op, int64_t bytes, int64_t sent, double dur) {
    calls.push_back({op, comm.name(), 0, bytes, sent, seq++, -1, dur});
  };
  auto ends = [&](const char* kind, int64_t elements, int root = 0) {  // as a duration
    std::vector<double> starts(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) starts[i] = start_of(i);
    return comm::member_end_times(kind, members, elements, 4, root, ctx.profile, starts)[r] -
           start_of(r);
  };
  const auto [begin, end] = comm::chunk_range(n, size, r);
  auto values = [&](int64_t count) {
    return Tensor::from({count}, std::vector<float>(static_cast<size_t>(count), 1.0f + r));
  };

  // Each call's tensors are made before its start: on a device, making them may take time.
  Tensor t = values(n);
  double at = start_next();
  comm.all_reduce(t);
  collective("all_reduce", n * 4, alg::all_reduce_sent_bytes(n, 4, size, r), ends("all_reduce", n));
  calls.back().start = at;

  at = start_next();
  comm.all_reduce_async(t).wait();
  collective("all_reduce", n * 4, alg::all_reduce_sent_bytes(n, 4, size, r), ends("all_reduce", n));
  calls.back().start = at;

  for (bool async : {false, true}) {
    Tensor in = values(n), mine = values(end - begin), all = values(n);
    at = start_next();
    if (async)
      comm.reduce_scatter_async(in, mine).wait();
    else
      comm.reduce_scatter(in, mine);
    collective("reduce_scatter", n * 4, alg::reduce_scatter_sent_bytes(n, 4, size, r),
               ends("reduce_scatter", n));
    calls.back().start = at;

    at = start_next();
    if (async)
      comm.all_gather_async(mine, all).wait();
    else
      comm.all_gather(mine, all);
    collective("all_gather", n * 4, alg::all_gather_sent_bytes(n, 4, size, r),
               ends("all_gather", n));
    calls.back().start = at;
  }

  const int64_t block = n % 5 + 1;
  Tensor blocks = values(block * size), received = values(block * size);
  at = start_next();
  comm.all_to_all(blocks, received);
  collective("all_to_all", block * size * 4, alg::all_to_all_sent_bytes(block * size, 4, size),
             ends("all_to_all", block * size));
  calls.back().start = at;

  // Uneven counts, some zero: what i sends j is (i + 2j + n) % 4 elements.
  std::vector<int64_t> send_counts(size), recv_counts(size);
  int64_t sending = 0, receiving = 0;
  for (int j = 0; j < size; ++j) {
    send_counts[j] = (r + 2 * j + n) % 4;
    recv_counts[j] = (j + 2 * r + n) % 4;
    sending += send_counts[j];
    receiving += recv_counts[j];
  }
  Tensor packed = values(sending), unpacked = values(receiving);
  at = start_next();
  comm.all_to_all_v(packed, send_counts, unpacked, recv_counts);
  collective("all_to_all_v", sending * 4, alg::all_to_all_v_sent_bytes(send_counts, 4, r), -1);
  calls.back().start = at;

  const int root = static_cast<int>(n % size);
  Tensor b = values(n);
  at = start_next();
  comm.broadcast(b, root);
  collective("broadcast", n * 4, alg::broadcast_sent_bytes(n, 4, size, r, root),
             ends("broadcast", n, root));
  calls.back().start = at;

  at = start_next();
  comm.barrier();
  collective("barrier", 0, alg::barrier_sent_bytes(), ends("barrier", 0));
  calls.back().start = at;

  // A ring of messages: send right, receive from the left (a receive's time depends on when its
  // sender sent, which not every backend knows: not compared).
  if (size > 1) {
    const int right = (r + 1) % size, left = (r - 1 + size) % size;
    Tensor out = values(n), in = values(n);
    at = start_next();
    comm::Work sending_work = comm.isend(out, right, 5);
    comm.recv(in, left, 5);
    sending_work.wait();
    calls.push_back({"send", comm.name(), at, n * 4, n * 4, -1, comm.world_rank(right), -1});
    calls.push_back({"recv", comm.name(), at, n * 4, 0, -1, comm.world_rank(left), -1});
  }
  return calls;
}

}  // namespace mgpu::testing
