// The MPI process around the communicator: start-up and exit, the waits every MPI call of the
// backend polls through, the "who waits for whom" diagnosis and the run-configuration agreement
// (the trace gather is mpi_trace_gather.cpp).
//
// Faults: MPI cannot cancel a wait, and a process that died or stopped never completes one. So a
// wait that passes the comm timeout asks every other process what it waits for (on a private
// duplicate of the world communicator, answered from their own wait loops), prints the local
// backend's "who waits for whom" table and ends the whole job with MPI_Abort. A process whose
// rank function raised tells the others as it finishes; a wait of theirs that does not complete
// within a short grace then ends the job at once, instead of at the comm timeout.
#include "core/comm/mpi/mpi_process.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/comm/comm.h"
#include "core/comm/mpi/mpi_comm.h"

namespace mgpu::comm::mpi {

void check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw CommError(fmt::format("{} failed (MPI error {})", what, code));
}

namespace {

// ---- Who waits for whom, across processes ----
namespace diagnosis {
MPI_Comm channel = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD: never mixes with user traffic
constexpr int kAsk = 1, kAnswer = 2, kFailed = 3;
std::string waiting_for;  // this process's current wait, as the table prints it ("" = running)
std::string failure;      // this process's rank function raised this (told to the others)

// Answers every pending "what do you wait for?" (called from the wait loops).
void answer_questions() {
  int pending = 0;
  MPI_Status status;
  while (MPI_Iprobe(MPI_ANY_SOURCE, kAsk, channel, &pending, &status) == MPI_SUCCESS && pending) {
    int token = 0;
    MPI_Recv(&token, 1, MPI_INT, status.MPI_SOURCE, kAsk, channel, MPI_STATUS_IGNORE);
    const std::string line = waiting_for.empty() ? "running" : waiting_for;
    MPI_Send(line.data(), static_cast<int>(line.size()), MPI_CHAR, status.MPI_SOURCE, kAnswer,
             channel);
  }
}

void wait_for_everyone_to_finish();  // below

// A failed rank's notice (sent as it finishes, after its own error is printed), as the headline
// of the table: "rank 1 failed: ...". Empty when none has come.
std::string another_failed() {
  int failed = 0;
  MPI_Status status;
  if (MPI_Iprobe(MPI_ANY_SOURCE, kFailed, channel, &failed, &status) != MPI_SUCCESS || !failed)
    return {};
  int length = 0;
  MPI_Get_count(&status, MPI_CHAR, &length);
  std::string what(static_cast<size_t>(length), '\0');
  MPI_Recv(what.data(), length, MPI_CHAR, status.MPI_SOURCE, kFailed, channel, MPI_STATUS_IGNORE);
  return fmt::format("rank {} failed: {}", status.MPI_SOURCE, what);
}

// Asks the others, waits a moment for their answers, prints the table and ends the job.
[[noreturn]] void abort_with_table(const std::string& headline) {
  int me = 0, size = 1;
  MPI_Comm_rank(channel, &me);
  MPI_Comm_size(channel, &size);
  std::vector<MPI_Request> asks;
  int token = 0;
  for (int r = 0; r < size; ++r) {
    if (r == me) continue;
    asks.emplace_back();
    MPI_Isend(&token, 1, MPI_INT, r, kAsk, channel, &asks.back());
  }
  std::vector<std::string> lines(size);
  std::vector<char> answered(size, 0);
  lines[me] = waiting_for;
  answered[me] = 1;
  int missing = size - 1;
  // A process that waits in communication answers within microseconds; one that is stopped,
  // dead, finished or computing does not answer at all, so a short grace period tells them apart.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (missing > 0 && std::chrono::steady_clock::now() < until) {
    answer_questions();
    int arrived = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kAnswer, channel, &arrived, &status);
    if (!arrived) {
      std::this_thread::yield();  // polling MPI_Iprobe, not sleeping as synchronization
      continue;
    }
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    std::string line(static_cast<size_t>(length), '\0');
    MPI_Recv(line.data(), length, MPI_CHAR, status.MPI_SOURCE, kAnswer, channel, MPI_STATUS_IGNORE);
    if (!answered[status.MPI_SOURCE]) --missing;
    answered[status.MPI_SOURCE] = 1;
    lines[status.MPI_SOURCE] = line;
  }
  std::string table;
  for (int r = 0; r < size; ++r)
    table += fmt::format("  rank {}: {}\n", r,
                         answered[r] ? lines[r]
                                     : "no answer: stopped, dead, finished, or busy outside "
                                       "communication");
  std::fprintf(stderr, "error: %s; who waits for whom:\n%s", headline.c_str(), table.c_str());
  std::fprintf(stderr, "error: rank %d ends the MPI job (MPI_Abort): MPI cannot cancel the wait\n",
               me);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);  // MPI_Abort does not return; this satisfies [[noreturn]]
}
}  // namespace diagnosis

// A process that is done (returned, or raised) waits for the others before MPI_Finalize, still
// answering "what do you wait for?": the others' tables then say it finished instead of "no
// answer", and if they end the job (MPI_Abort) it is killed like any running process. (Sitting
// in MPI_Finalize instead, Open MPI's mpirun sometimes never ended the job after the others'
// MPI_Abort: the survivors' diagnosis printed, then mpirun hung.)
void diagnosis::wait_for_everyone_to_finish() {
  if (channel == MPI_COMM_NULL) return;
  waiting_for = "finished: left its rank function (returned or raised), will never send";
  int me = 0, size = 1;
  MPI_Comm_rank(channel, &me);
  MPI_Comm_size(channel, &size);
  // The notices stay pending requests, tested in the loop below: a freed request's message was
  // sometimes never delivered (Open MPI), and the others then waited out the comm timeout.
  std::vector<MPI_Request> notices;
  for (int r = 0; r < size && !failure.empty(); ++r) {
    if (r == me) continue;
    notices.emplace_back();
    MPI_Isend(failure.data(), static_cast<int>(failure.size()), MPI_CHAR, r, kFailed, channel,
              &notices.back());
  }
  MPI_Request req;
  if (MPI_Ibarrier(channel, &req) != MPI_SUCCESS) return;
  int done = 0;
  while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    answer_questions();
    another_failed();  // finished too: nothing to end
    int sent = 0;      // progresses the notices (they complete once the others take them)
    if (!notices.empty())
      MPI_Testall(static_cast<int>(notices.size()), notices.data(), &sent, MPI_STATUSES_IGNORE);
    std::this_thread::yield();  // polling MPI_Test, not sleeping as synchronization
  }
  waiting_for.clear();
}

}  // namespace

void open_diagnosis_channel() {
  if (diagnosis::channel == MPI_COMM_NULL) MPI_Comm_dup(MPI_COMM_WORLD, &diagnosis::channel);
}

// Polls until `req` completes, answering the others' questions meanwhile; past `timeout` seconds
// prints the "who waits for whom" table and ends the job. `what` completes "rank 2 waits ...".
// Returns MPI_Test's code: MPI_SUCCESS, or the request's error (MPI_ERR_TRUNCATE: a message larger
// than the posted buffer), which the caller turns into a diagnosis.
int wait_request(MPI_Request& req, MPI_Status& status, const std::string& what, double timeout) {
  int done = 0;
  int code = MPI_Test(&req, &done, &status);
  if (done || code != MPI_SUCCESS) return code;
  diagnosis::waiting_for = "waits " + what;
  auto start = std::chrono::steady_clock::now();
  // After another rank's failure notice, a wait that does not complete within a short grace
  // (this rank may be about to raise the same error itself) ends the job, not the comm timeout.
  constexpr double kGraceAfterFailure = 2.0;
  std::string failed;
  double failed_at = 0;
  while (true) {
    code = MPI_Test(&req, &done, &status);
    if (done || code != MPI_SUCCESS) break;
    diagnosis::answer_questions();
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (failed.empty() && !(failed = diagnosis::another_failed()).empty()) failed_at = waited;
    if (!failed.empty() && waited > failed_at + kGraceAfterFailure)
      diagnosis::abort_with_table(failed);
    if (waited > timeout) {
      int me = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
      diagnosis::abort_with_table(
          fmt::format("timeout: rank {} waited more than {} s (comm_timeout)", me, timeout));
    }
    std::this_thread::yield();  // polling MPI_Test, not sleeping as synchronization
  }
  diagnosis::waiting_for.clear();
  return code;
}
void note_failure(const std::string& what) {
  if (diagnosis::failure.empty()) diagnosis::failure = what;
}

Process init_process() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    // Errors come back as codes (every communicator inherits this), so a receive of a message
    // larger than its buffer is diagnosed like any other mismatch instead of ending the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized) return;
      diagnosis::wait_for_everyone_to_finish();
      MPI_Finalize();
    });
  }
  Process p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.size);
  return p;
}
std::vector<std::string> world_strings_if_different(const std::string& mine, double timeout) {
  const double hash = static_cast<double>(std::hash<std::string>{}(mine) & ((1ull << 52) - 1));
  double ends[2] = {hash, -hash}, extremes[2];
  MPI_Request req;
  MPI_Status status;
  const std::string what = "in the start-up check that every process runs the same configuration";
  check(MPI_Iallreduce(ends, extremes, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req),
        "MPI_Iallreduce");
  check(wait_request(req, status, what, timeout), "MPI_Iallreduce");
  if (extremes[0] == -extremes[1]) return {};  // max == min: every hash is this one
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size), offsets(size);
  check(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD, &req),
        "MPI_Iallgather");
  check(wait_request(req, status, what, timeout), "MPI_Iallgather");
  int total = 0;
  for (int r = 0; r < size; ++r) offsets[r] = std::exchange(total, total + lengths[r]);
  std::string all(static_cast<size_t>(total), '\0');
  check(MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                        MPI_CHAR, MPI_COMM_WORLD, &req),
        "MPI_Iallgatherv");
  check(wait_request(req, status, what, timeout), "MPI_Iallgatherv");
  std::vector<std::string> strings;
  for (int r = 0; r < size; ++r) strings.push_back(all.substr(offsets[r], lengths[r]));
  return strings;
}

}  // namespace mgpu::comm::mpi
