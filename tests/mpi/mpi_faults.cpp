// Run under mpirun -n K with one fault: rank 1 misbehaves while the others all-reduce.
//   exit      rank 1 returns before the all-reduce (the others would wait for it forever)
//   raise     rank 1 throws inside its rank function
//   stall     rank 1 stops itself (SIGSTOP), as a hung or debugged process would
//   mismatch  rank 1 all-reduces a different element count
//   mismatch_all_to_all  rank 1 calls all_gather where the others call all_to_all
//   mismatch_counts  in an all_to_all_v rank 1 sends rank 0 2 elements where rank 0 expects 1
//   recv_larger   rank 0 sends rank 1 8 floats where rank 1 receives 4 (MPI would truncate)
//   recv_smaller  rank 0 sends rank 1 4 floats where rank 1 receives 8
// Every process must end non-zero within the comm timeout plus a few seconds, with the
// diagnosis on stderr (tests/mpi/expect_fault.sh checks both). An optional second argument sets
// the comm timeout (default 3 s): with 30 s, a fault that raises on one rank (raise,
// recv_larger, recv_smaller) must still end the others promptly, as the local backend does.
#include <csignal>
#include <cstdio>
#include <ctime>
#include <exception>
#include <set>
#include <stdexcept>
#include <string>

#include "core/comm/comm.h"
#include "core/world/world.h"
#include "exercises/exercises.h"  // the reference ring all-reduce, every backend's all_reduce

using namespace mgpu;

int main(int argc, char** argv) {
  const std::string fault = argc > 1 ? argv[1] : "";
  const std::set<std::string> faults = {
      "exit",        "raise",        "stall",          "mismatch", "mismatch_all_to_all",
      "recv_larger", "recv_smaller", "mismatch_counts"};
  if (!faults.contains(fault)) {
    std::fprintf(stderr,
                 "usage: mpi_faults exit|raise|stall|mismatch|mismatch_all_to_all|recv_larger|"
                 "recv_smaller|mismatch_counts (under mpirun)\n");
    return 2;
  }
  WorldOptions o;
  o.backend = "mpi";
  o.comm_timeout = argc > 2 ? std::stod(argv[2]) : 3;
  o.all_reduce = &mgpu::reference::ring_all_reduce;
  World world(o);
  try {
    world.run([&](RankContext& ctx) {
      Tensor warm = Tensor::zeros({16}, MemCategory::comm_buffers);
      ctx.comm->all_reduce(warm);  // everyone is up and talking
      if (ctx.rank == 0) {         // the clock for "within timeout + 5 s" starts now, not at launch
        std::printf("fault injected at %lld\n", static_cast<long long>(std::time(nullptr)));
        std::fflush(stdout);
      }
      const bool culprit = ctx.rank == 1;
      if (culprit && fault == "exit") return;
      if (culprit && fault == "raise") throw std::runtime_error("rank 1 raised on purpose");
      if (culprit && fault == "stall") std::raise(SIGSTOP);
      if (fault == "recv_larger" || fault == "recv_smaller") {
        const int64_t sent = fault == "recv_larger" ? 8 : 4, posted = 12 - sent;
        if (ctx.rank == 0) ctx.comm->send(Tensor::zeros({sent}, MemCategory::comm_buffers), 1);
        if (culprit) {
          Tensor t = Tensor::zeros({posted}, MemCategory::comm_buffers);
          ctx.comm->recv(t, 0);
        }
      }
      if (fault == "mismatch_all_to_all") {
        const int64_t n = 4 * ctx.world_size;
        Tensor out = Tensor::zeros({n}, MemCategory::comm_buffers);
        if (culprit)
          ctx.comm->all_gather(Tensor::zeros({4}, MemCategory::comm_buffers), out);
        else
          ctx.comm->all_to_all(Tensor::zeros({n}, MemCategory::comm_buffers), out);
        return;
      }
      if (fault == "mismatch_counts") {  // one element to every rank; rank 1 two to rank 0
        std::vector<int64_t> send(ctx.world_size, 1), recv(ctx.world_size, 1);
        if (culprit) send[0] = 2;
        Tensor in = Tensor::zeros({ctx.world_size + (culprit ? 1 : 0)}, MemCategory::comm_buffers);
        Tensor out = Tensor::zeros({ctx.world_size}, MemCategory::comm_buffers);
        ctx.comm->all_to_all_v(in, send, out, recv);
        return;
      }
      Tensor t = Tensor::zeros({culprit && fault == "mismatch" ? 8 : 4}, MemCategory::comm_buffers);
      ctx.comm->all_reduce(t);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
