// The MPI backend: each process is one rank. This file is its point-to-point layer; the
// collectives are the shared algorithms every backend runs (AlgorithmicComm: the ring all-reduce
// it was given, the rings, the tree, the pairwise all-to-all, all on this Comm's send/recv), so a
// run under mpirun sums in the same order, sends the same messages and, on the modeled clock,
// draws the same timeline as the thread run, bit for bit. Messages a
// collective sends travel on a private duplicate of the communicator, apart from user p2p.
// MPI_Allreduce itself is kept for the collectives lesson's race (library_all_reduce).
//
// Faults: MPI cannot cancel a wait, and a process that died or stopped never completes one. So a
// wait that passes the comm timeout asks every other process what it waits for (on a private
// duplicate of the world communicator, answered from their own wait loops), prints the local
// backend's "who waits for whom" table and ends the whole job with MPI_Abort. Before each
// collective the members compare a hash of their call (folded into one small all-reduce); on a
// difference they gather the calls and every member raises the local backend's mismatch table.
// On the modeled clock every message carries its send time in a small header, as in the local
// backend's mailboxes.
#include "core/comm/mpi/mpi_comm.h"

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/comm/algorithms/algorithmic_comm.h"
#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm::mpi {

namespace {

void check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw CommError(fmt::format("{} failed (MPI error {})", what, code));
}

// ---- Who waits for whom, across processes ----
namespace diagnosis {
MPI_Comm channel = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD: never mixes with user traffic
constexpr int kAsk = 1, kAnswer = 2;
std::string waiting_for;  // this process's current wait, as the table prints it ("" = running)

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
  MPI_Request req;
  if (MPI_Ibarrier(channel, &req) != MPI_SUCCESS) return;
  int done = 0;
  while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    answer_questions();
    std::this_thread::yield();  // polling MPI_Test, not sleeping as synchronization
  }
  waiting_for.clear();
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
  while (true) {
    code = MPI_Test(&req, &done, &status);
    if (done || code != MPI_SUCCESS) break;
    diagnosis::answer_questions();
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

float* host_floats(Tensor& t) {
  return t.has_data() && t.numel() > 0 ? t.f32() : nullptr;
}

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

// The members' ranks in MPI_COMM_WORLD, in `comm`'s rank order.
std::vector<int> world_ranks_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Comm_group(comm, &group);
  std::vector<int> mine(size), world(size);
  for (int i = 0; i < size; ++i) mine[i] = i;
  MPI_Group_translate_ranks(group, size, mine.data(), world_group, world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world;
}

// The point-to-point layer over MPI; the collectives are AlgorithmicComm's.
class MpiComm final : public AlgorithmicComm {
 public:
  MpiComm(MPI_Comm comm, RankContext& ctx, std::string name, double timeout, AllReduceFn all_reduce)
      : AlgorithmicComm(ctx, std::move(name), world_ranks_of(comm), rank_in(comm),
                        std::move(all_reduce)),
        comm_(comm),
        timeout_(timeout) {
    MPI_Comm_dup(comm_, &collective_comm_);
  }
  ~MpiComm() override {
    MPI_Comm_free(&collective_comm_);
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }

  std::string backend() const override { return "mpi"; }

  // Open MPI's own all-reduce on this group's buffers (the collectives lesson races the ring
  // against it): untraced and off the modeled clock, but still a wait the watchdog can diagnose.
  void library_all_reduce(Tensor& t) {
    MPI_Request req;
    check(MPI_Iallreduce(MPI_IN_PLACE, host_floats(t), static_cast<int>(t.numel()), MPI_FLOAT,
                         MPI_SUM, comm_, &req),
          "MPI_Iallreduce");
    wait(req, fmt::format("in MPI_Allreduce of group {}", name()));
  }

  // ---- point-to-point ----
  void send(const Tensor& t, int dst, int tag) override {
    PostedSend posted = post(t, dst, tag);
    wait(posted.request, posted.what);
    compute_waits_for(posted.end);
  }
  void recv(Tensor& t, int src, int tag) override {
    PostedRecv posted = post_recv(t, src, tag);
    compute_waits_for(finish_recv(posted));
  }
  // Adds straight from the message buffer MPI received into: no temporary tensor, the same sum.
  void recv_reduce(Tensor& accumulate, int src, int tag) override {
    if (accumulate.dtype() != DType::f32) return Comm::recv_reduce(accumulate, src, tag);
    PostedRecv posted = post_recv(accumulate, src, tag);
    posted.accumulate = true;
    compute_waits_for(finish_recv(posted));
  }
  // The message (a copy with its header) is handed to MPI now; wait() completes the request, so
  // every rank can post its send before any of them blocks in a recv (the ring pattern).
  Work isend(const Tensor& t, int dst, int tag) override {
    return on_wait([this, posted = post(t, dst, tag)]() mutable {
      wait(posted.request, posted.what);
      compute_waits_for(posted.end);
    });
  }
  // Posted now, so irecvs match messages in the order they were posted (as in the local backend).
  Work irecv(Tensor& t, int src, int tag) override {
    return on_wait([this, posted = post_recv(t, src, tag)]() mutable {
      compute_waits_for(finish_recv(posted));
    });
  }

  std::unique_ptr<Comm> split(int color, int key, const std::string& name) override {
    MPI_Comm sub;
    check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split");
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiComm>(
        sub, ctx(), name.empty() ? fmt::format("{}.{}", this->name(), color) : name, timeout_,
        all_reduce_algorithm());
  }

 private:
  // Polls until `req` completes; past the timeout, names this rank and what it waited for.
  // `what` completes "rank 2 waits ..." in the table: "for recv from rank 1 (tag 7) in group
  // world", "in all_reduce #3 of group world: all_reduce(count=4, f32, sum) (recv from rank 1)".
  void wait(MPI_Request& req, const std::string& what) {
    MPI_Status status;
    check(wait_request(req, status, what, timeout_), "MPI_Test");
  }

  // Every member hashes its call; one all-reduce of {hash, -hash} (max) tells whether all hashes
  // agree. If not, the members gather their calls and all raise the same table the local backend
  // raises. (It moves no modeled time: the local backend's check is free too.)
  void agree_on_call(int64_t seq, const CollectiveCall& collective) override {
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
    check(MPI_Iallgather(my_call.data(), kWidth, MPI_CHAR, calls.data(), kWidth, MPI_CHAR, comm_,
                         &req),
          "MPI_Iallgather");
    wait(req, label_);
    std::string message = fmt::format("collective #{} in group {} does not match:", seq, name());
    for (int r = 0; r < size(); ++r)
      message += fmt::format("{} rank {} called {}", r ? ";" : "", world_rank(r),
                             std::string(calls.data() + static_cast<size_t>(r) * kWidth));
    throw CommError(message);
  }

  // Inside a collective its messages go on the private duplicate, never meeting user p2p.
  MPI_Comm channel() const { return in_collective() ? collective_comm_ : comm_; }

  std::string describe_wait(const char* direction, int peer, int tag) const {
    return in_collective() ? fmt::format("{} ({} rank {})", label_, direction, world_rank(peer))
                           : fmt::format("for {} rank {} (tag {}) in group {}", direction,
                                         world_rank(peer), tag, name());
  }

  // A send handed to MPI: the buffer must live until the request completes.
  struct PostedSend {
    std::vector<char> buffer;
    MPI_Request request = MPI_REQUEST_NULL;
    std::string what;
    double end = 0;  // when the transfer ends on this rank's clock
  };
  struct PostedRecv {
    std::vector<char> buffer;
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Status status{};
    std::string what;
    Tensor target;  // shares storage with the caller's tensor
    int src = 0, tag = 0;
    double posted = 0;        // when the receive was posted on this rank's clock
    bool accumulate = false;  // recv_reduce: add the payload into target instead of copying
  };

  // Header: the sender's modeled issue time, then the payload. This is the one place bytes leave
  // a rank, so it is where they are counted for the trace.
  PostedSend post(const Tensor& t, int dst, int tag) {
    check_peer(dst, "send to");
    RankClock& clock = ctx().clock;
    double sent = clock.comm_issue_time();
    std::vector<char> buffer(sizeof(double) + static_cast<size_t>(t.has_data() ? t.bytes() : 0));
    std::memcpy(buffer.data(), &sent, sizeof(double));
    if (t.has_data() && t.bytes() > 0)
      std::memcpy(buffer.data() + sizeof(double), t.raw(), static_cast<size_t>(t.bytes()));
    PostedSend posted;
    posted.buffer = std::move(buffer);
    posted.what = describe_wait("send to", dst, tag);
    check(MPI_Isend(posted.buffer.data(), static_cast<int>(posted.buffer.size()), MPI_BYTE, dst,
                    tag, channel(), &posted.request),
          "MPI_Isend");
    double transfer = ctx().profile.transfer_time(my_world_rank(), world_rank(dst), t.bytes());
    posted.end = clock.modeled() ? sent + transfer : clock.wall_now();
    clock.wait_comm_until(posted.end);
    count_sent(t.bytes());
    record_p2p("send", dst, t.bytes(), t.bytes(), sent, posted.end);
    return posted;
  }

  PostedRecv post_recv(Tensor& t, int src, int tag) {
    check_peer(src, "recv from");
    PostedRecv p;
    p.posted = ctx().clock.comm_issue_time();
    p.buffer.resize(sizeof(double) + static_cast<size_t>(t.has_data() ? t.bytes() : 0));
    p.what = describe_wait("recv from", src, tag);
    p.target = t;
    p.src = src;
    p.tag = tag;
    check(MPI_Irecv(p.buffer.data(), static_cast<int>(p.buffer.size()), MPI_BYTE, src, tag,
                    channel(), &p.request),
          "MPI_Irecv");
    return p;
  }

  // Receive ends at max(posted, sent + transfer), as in the local backend's mailboxes.
  double finish_recv(PostedRecv& p) {
    check_received_size(p, wait_request(p.request, p.status, p.what, timeout_));
    Tensor& t = p.target;
    double sent;
    std::memcpy(&sent, p.buffer.data(), sizeof(double));
    const char* payload = p.buffer.data() + sizeof(double);
    if (t.has_data() && t.bytes() > 0 && p.accumulate)
      algorithms::add_floats(t.f32(), reinterpret_cast<const float*>(payload), t.numel());
    else if (t.has_data() && t.bytes() > 0)
      std::memcpy(t.raw(), payload, static_cast<size_t>(t.bytes()));
    RankClock& clock = ctx().clock;
    double transfer = ctx().profile.transfer_time(world_rank(p.src), my_world_rank(), t.bytes());
    double end = clock.modeled() ? std::max(p.posted, sent + transfer) : clock.wall_now();
    clock.wait_comm_until(end);
    record_p2p("recv", p.src, t.bytes(), 0, p.posted, end);
    return end;
  }

  // A message of another size than the posted buffer is the local backend's error, word for
  // word: larger ones MPI truncates (MPI_ERR_TRUNCATE, returned since the world communicator's
  // error handler is MPI_ERRORS_RETURN), smaller ones MPI_Get_count measures.
  void check_received_size(PostedRecv& p, int code) {
    const int64_t holds = static_cast<int64_t>(p.buffer.size() - sizeof(double));
    int error_class = MPI_SUCCESS;
    if (code != MPI_SUCCESS) MPI_Error_class(code, &error_class);
    if (error_class == MPI_ERR_TRUNCATE)
      throw CommError(fmt::format(
          "rank {} received more than {} bytes from rank {} (tag {}) in group {}, but its buffer "
          "holds {}",
          my_world_rank(), holds, world_rank(p.src), p.tag, name(), holds));
    check(code, "MPI_Test");
    int count = 0;
    MPI_Get_count(&p.status, MPI_BYTE, &count);
    if (count != static_cast<int>(p.buffer.size()))
      throw CommError(fmt::format(
          "rank {} received {} bytes from rank {} (tag {}) in group {}, but its buffer holds {}",
          my_world_rank(), std::max<int64_t>(0, count - int64_t{sizeof(double)}), world_rank(p.src),
          p.tag, name(), holds));
  }

  MPI_Comm comm_;
  MPI_Comm collective_comm_ = MPI_COMM_NULL;  // the collectives' own messages
  double timeout_;
  std::string label_;  // the running collective, as the wait table prints it
};

nlohmann::json event_to_json(const trace::Event& e) {
  return {{"name", e.name},
          {"cat", e.cat},
          {"rank", e.rank},
          {"lane", int(e.lane)},
          {"start", e.start},
          {"dur", e.dur},
          {"mb", e.microbatch},
          {"layer", e.layer},
          {"chunk", e.chunk},
          {"step", e.step},
          {"peer", e.peer},
          {"bytes", e.bytes},
          {"sent_bytes", e.sent_bytes},
          {"flops", e.flops},
          {"group", e.group},
          {"op", e.op},
          {"seq", e.seq}};
}

trace::Event event_from_json(const nlohmann::json& j) {
  trace::Event e;
  e.name = j["name"];
  e.cat = j["cat"];
  e.rank = j["rank"];
  e.lane = static_cast<trace::Lane>(j["lane"].get<int>());
  e.start = j["start"];
  e.dur = j["dur"];
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
  return e;
}

}  // namespace

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

std::unique_ptr<Comm> make_world_comm(RankContext& ctx, double timeout_seconds,
                                      AllReduceFn all_reduce) {
  if (diagnosis::channel == MPI_COMM_NULL) MPI_Comm_dup(MPI_COMM_WORLD, &diagnosis::channel);
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, ctx, "world", timeout_seconds,
                                   std::move(all_reduce));
}

void library_all_reduce(Comm& comm, Tensor& t) {
  auto* mpi = dynamic_cast<MpiComm*>(&comm);
  if (!mpi)
    throw std::logic_error("library_all_reduce needs a Comm of the mpi backend, not " +
                           comm.backend());
  mpi->library_all_reduce(t);
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
