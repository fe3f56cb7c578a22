// Binomial-tree broadcast. Number ranks relative to the root (v = 0 is the root). In round k
// (mask = 2^k) every rank that already has the data (v < mask) sends it to v + mask, so the
// set of ranks holding it doubles each round: ceil(log2 N) rounds instead of N-1.
#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm::algorithms {

void tree_broadcast(Comm& comm, Tensor& t, int root) {
  const int n = comm.size();
  const int v = (comm.rank() - root + n) % n;
  auto actual = [&](int relative) { return (relative + root) % n; };
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v < mask) {
      if (v + mask < n) comm.send(t, actual(v + mask));
    } else if (v < 2 * mask) {
      comm.recv(t, actual(v - mask));
    }
  }
}

}  // namespace mgpu::comm::algorithms
