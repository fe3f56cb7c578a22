// A big PyTorch profiler trace: writes a ~1 GB Kineto trace (one rank; CPU ops, runtime calls,
// kernels with Kineto's usual args, NCCL kernels, memcpys, flow and memory events, 200 steps),
// then times what `mgpu analyze` does: open it (streaming parse) and analyse every step. Prints
// the seconds and the peak resident memory. Target: under 10 s and 1 GB resident.
//   ./build/bench_kineto_reader [GB] [folder] [keep]   (default 1 GB in the system temp folder;
//   "keep" leaves the trace there)
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/trace/breakdown.h"
#include "core/trace/trace_files.h"

using namespace mgpu;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kSteps = 200;
constexpr const char* kKernel =
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)";

// One launch: a CPU op, its runtime call, the kernel, and the flow between them.
void write_launch(std::FILE* f, int64_t id, double t, bool nccl, bool memcpy) {
  std::fprintf(f,
               "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::add\",\"pid\":7,\"tid\":7,"
               "\"ts\":%.3f,\"dur\":9.5,\"args\":{\"External id\":%lld,\"Sequence number\":%lld,"
               "\"Fwd thread id\":0,\"Record function id\":0,\"Ev Idx\":%lld}},\n",
               t, (long long)id, (long long)id, (long long)id);
  std::fprintf(f,
               "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":7,"
               "\"tid\":7,\"ts\":%.3f,\"dur\":4.25,\"args\":{\"External id\":%lld,\"cbid\":211,"
               "\"correlation\":%lld}},\n",
               t + 2, (long long)id, (long long)id);
  const char* cat = memcpy ? "gpu_memcpy" : "kernel";
  const char* name = nccl     ? "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs)"
                     : memcpy ? "Memcpy DtoD (Device -> Device)"
                              : kKernel;
  std::fprintf(f,
               "{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
               "\"dur\":%.3f,\"args\":{\"External id\":%lld,\"queued\":0,\"device\":0,"
               "\"context\":1,\"stream\":%d,\"correlation\":%lld,\"registers per thread\":16,"
               "\"shared memory\":0,\"blocks per SM\":4.5,\"warps per SM\":18.0,"
               "\"grid\":[592,1,1],\"block\":[128,1,1],\"est. achieved occupancy %%\":100%s}},\n",
               cat, name, nccl ? 17 : 7, t + 12, nccl ? 30.0 : 8.0, (long long)id, nccl ? 17 : 7,
               (long long)id,
               nccl ? ",\"Collective name\":\"allreduce\",\"In msg nelems\":1048576,"
                      "\"dtype\":\"Float\",\"Process Group Name\":\"0\""
                    : "");
  std::fprintf(f,
               "{\"ph\":\"f\",\"id\":%lld,\"pid\":0,\"tid\":7,\"ts\":%.3f,\"cat\":\"ac2g\","
               "\"name\":\"ac2g\",\"bp\":\"e\"},\n",
               (long long)id, t + 12);
  if (id % 16 == 0)
    std::fprintf(f,
                 "{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"s\":\"t\",\"name\":\"[memory]\","
                 "\"pid\":7,\"tid\":7,\"ts\":%.3f,\"args\":{\"Total Reserved\":2097152,"
                 "\"Total Allocated\":%lld,\"Bytes\":512,\"Addr\":1,\"Device Id\":0,"
                 "\"Device Type\":1}},\n",
                 t + 1, (long long)(1 << 20) + (id % 1000) * 512);
}

int64_t write_trace(const std::filesystem::path& path, int64_t target_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return -1;
  std::fprintf(f,
               "{\"schemaVersion\":1,\"distributedInfo\":{\"backend\":\"nccl\",\"rank\":0,"
               "\"world_size\":8},\"traceEvents\":[\n");
  const int64_t launches = target_bytes / 985;  // ~985 bytes of JSON per launch
  const int64_t per_step = launches / kSteps;
  double t = 1.7e12;  // microseconds since the epoch, as Kineto writes them
  for (int64_t id = 0; id < launches; ++id) {
    if (id % per_step == 0 && id / per_step < kSteps)
      std::fprintf(f,
                   "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#%lld\","
                   "\"pid\":7,\"tid\":7,\"ts\":%.3f,\"dur\":%.3f},\n",
                   (long long)(id / per_step), t, per_step * 20.0 - 1);
    write_launch(f, id, t, id % 10 == 9, id % 10 == 4);
    t += 20;
  }
  std::fprintf(f,
               "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"tid\":0,"
               "\"args\":{\"name\":\"GPU 0\"}}\n],\"traceName\":\"bench\"}\n");
  const long size = std::ftell(f);
  std::fclose(f);
  return size;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// This process's CPU seconds (user + system): the figure a loaded machine does not inflate.
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  const double gb = argc > 1 ? std::stod(argv[1]) : 1.0;
  const std::filesystem::path dir =
      argc > 2 ? std::filesystem::path(argv[2]) : std::filesystem::temp_directory_path();
  const auto path = dir / "mgpu_bench_kineto.json";
  const int64_t bytes = write_trace(path, static_cast<int64_t>(gb * 1e9));
  if (bytes < 0) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 2;
  }
  rusage before{};
  getrusage(RUSAGE_SELF, &before);  // the program and its libraries, before any trace is read
  std::printf("trace: %s, %.2f GB\n", path.c_str(), bytes / 1e9);
  auto t0 = Clock::now();
  double cpu0 = cpu_seconds();
  const trace::RunTrace run = trace::read_run_trace({path.string()});
  const double open_s = seconds_since(t0), open_cpu = cpu_seconds() - cpu0;
  t0 = Clock::now();
  cpu0 = cpu_seconds();
  double step_time = 0;
  for (const auto& step : trace::breakdown_steps(run.trace, run.launch_end))
    step_time += step.window.length();
  const auto top = trace::top_kernels(run.trace, 0, trace::analysis_window(run.trace), 5);
  const double analyze_s = seconds_since(t0), analyze_cpu = cpu_seconds() - cpu0;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "events kept: %zu (of a %.2f GB file); steps: %zu (sum of step times %.3f s); "
      "top ops: %zu\n",
      run.trace.events.size(), bytes / 1e9, trace::trace_steps(run.trace).size(), step_time,
      top.size());
  std::printf(
      "open: %.2f s (%.2f s CPU)   analyze (every step + top ops): %.2f s (%.2f s CPU)\n"
      "total: %.2f s (%.2f s CPU)   peak RSS: %.0f MB, %.0f MB of it before reading   (target: "
      "under 10 s, under 1000 MB)\n",
      open_s, open_cpu, analyze_s, analyze_cpu, open_s + analyze_s, open_cpu + analyze_cpu,
      usage.ru_maxrss / 1024.0, before.ru_maxrss / 1024.0);
  if (!(argc > 3 && std::string(argv[3]) == "keep")) std::filesystem::remove(path);
  return 0;
}
