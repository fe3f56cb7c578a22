// The members' agreement on each collective of the MPI backend: the same call (a hash, then the
// calls themselves on a difference) and, for all_to_all_v, counts that match pair by pair.
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/comm/mpi/mpi_comm_internal.h"
#include "core/comm/mpi/mpi_process.h"

namespace mgpu::comm::mpi::detail {

// Every member hashes its call; one all-reduce of {hash, -hash} (max) tells whether all hashes
// agree. If not, the members gather their calls and all raise the same table the local backend
// raises. (It moves no modeled time: the local backend's check is free too.)
void MpiComm::agree_on_call(int64_t seq, const CollectiveCall& collective) {
  const std::string call = collective.describe();
  label_ = fmt::format("in {} #{} of group {}: {}", collective.kind, seq, name(), call);
  const double hash = static_cast<double>(std::hash<std::string>{}(call) & ((1ull << 52) - 1));
  double mine[2] = {hash, -hash}, all[2];
  MPI_Request req;
  check(MPI_Iallreduce(mine, all, 2, MPI_DOUBLE, MPI_MAX, comm_, &req), "MPI_Iallreduce");
  wait(req, label_);
  if (all[0] == -all[1]) return;
  constexpr int kWidth = 120;
  std::vector<char> calls(static_cast<size_t>(kWidth) * size(), '\0');
  std::vector<char> my_call(kWidth, '\0');
  std::memcpy(my_call.data(), call.data(), std::min<size_t>(call.size(), kWidth - 1));
  check(
      MPI_Iallgather(my_call.data(), kWidth, MPI_CHAR, calls.data(), kWidth, MPI_CHAR, comm_, &req),
      "MPI_Iallgather");
  wait(req, label_);
  std::string message = fmt::format("collective #{} in group {} does not match:", seq, name());
  for (int r = 0; r < size(); ++r)
    message += fmt::format("{} rank {} called {}", r ? ";" : "", world_rank(r),
                           std::string(calls.data() + static_cast<size_t>(r) * kWidth));
  throw CommError(message);
}

// all_to_all_v: the members all-gather their send and recv counts (off the modeled clock, as
// the call's agreement) and each checks every pair, so a mismatch raises the same CommError on
// every member, as on the local backend.
void MpiComm::agree_on_counts(int64_t seq, std::span<const int64_t> send_counts,
                              std::span<const int64_t> recv_counts) {
  const int n = size();
  std::vector<int64_t> mine(send_counts.begin(), send_counts.end());
  mine.insert(mine.end(), recv_counts.begin(), recv_counts.end());
  std::vector<int64_t> all(static_cast<size_t>(2) * n * n);
  MPI_Request req;
  check(
      MPI_Iallgather(mine.data(), 2 * n, MPI_INT64_T, all.data(), 2 * n, MPI_INT64_T, comm_, &req),
      "MPI_Iallgather");
  wait(req, label_ + " (its counts)");
  std::vector<int64_t> send, recv;
  for (int r = 0; r < n; ++r) {
    auto member = all.begin() + static_cast<ptrdiff_t>(2) * n * r;
    send.insert(send.end(), member, member + n);
    recv.insert(recv.end(), member + n, member + 2 * n);
  }
  check_all_to_all_v_counts(send, recv, n, members(), name(), seq);
}

}  // namespace mgpu::comm::mpi::detail
