// Two hand-made PyTorch profiler (Kineto) traces of one 2-GPU step with known answers, shared by
// the reader, breakdown and `mgpu analyze` tests. Times are microseconds, as Kineto writes them.
//
// Rank 1 (the first file in tests; distributedInfo.rank 1), step 5 on the CPU at [1000, 1100]:
//   gemm [1020,1050] launched by 1015; memcpy [1040,1060] by 1025; NCCL all-reduce of 1024
//   floats [1055,1100] by 1035; relu [1120,1130] by 1110 (its launch returned after the step);
//   add [1135,1140] by 1097. Memory: 1000 B at 1005, 5000 B at 1070 (GPU), 99999 B (CPU).
// Rank 0 (distributedInfo.rank 0), another clock, step 5 at [501000, 501140]: a runtime call at
//   [500990, 500995] launches gemm [501000,501100]; NCCL all-reduce [501100,501140].
// Aligned by first step: rank 0 starts 10 us before its step, so both steps start at 10 us and
// rank 1's times are t - 990, rank 0's t - 500990. Step 5's window is [10, 150] us.
#pragma once
#include <nlohmann/json.hpp>

namespace mgpu::testing {

inline nlohmann::json kineto_x(const char* cat, const char* name, double ts, double dur,
                               nlohmann::json args = nlohmann::json::object()) {
  return {{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 0},
          {"tid", 7},  {"ts", ts},   {"dur", dur},   {"args", std::move(args)}};
}

inline nlohmann::json kineto_memory(double ts, int64_t total, int device_type) {
  return {{"ph", "i"},
          {"cat", "cpu_instant_event"},
          {"name", "[memory]"},
          {"pid", 1},
          {"tid", 1},
          {"ts", ts},
          {"s", "t"},
          {"args", {{"Total Allocated", total}, {"Device Type", device_type}, {"Bytes", 16}}}};
}

inline nlohmann::json kineto_gpu_rank1() {
  using nlohmann::json;
  auto corr = [](int c) { return json{{"correlation", c}, {"stream", 7}, {"device", 0}}; };
  json nccl_args = corr(3);
  nccl_args.update({{"Collective name", "allreduce"},
                    {"In msg nelems", 1024},
                    {"dtype", "Float"},
                    {"Process Group Name", "0"}});
  json events = json::array({
      kineto_x("user_annotation", "ProfilerStep#5", 1000, 100),
      kineto_x("cuda_runtime", "cudaLaunchKernel", 1010, 5, corr(1)),
      kineto_x("kernel", "sm80_gemm", 1020, 30, corr(1)),
      kineto_x("cuda_runtime", "cudaMemcpyAsync", 1020, 5, corr(2)),
      kineto_x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 1040, 20, corr(2)),
      kineto_x("cuda_runtime", "cudaLaunchKernel", 1030, 5, corr(3)),
      kineto_x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs)", 1055, 45,
               nccl_args),
      kineto_x("cuda_runtime", "cudaLaunchKernel", 1090, 20, corr(4)),
      kineto_x("kernel", "vectorized_elementwise_kernel", 1120, 10, corr(4)),
      kineto_x("cuda_runtime", "cudaLaunchKernel", 1095, 2, corr(5)),
      kineto_x("kernel", "elementwise_add", 1135, 5, corr(5)),
      kineto_x("cpu_op", "aten::mm", 1008, 10),
      kineto_memory(1005, 1000, 1),
      kineto_memory(1070, 5000, 1),
      kineto_memory(1080, 99999, 0),
      {{"ph", "M"},
       {"name", "process_name"},
       {"pid", 0},
       {"tid", 0},
       {"args", {{"name", "GPU 0"}}}},
      {{"ph", "s"},
       {"id", 1},
       {"cat", "ac2g"},
       {"name", "ac2g"},
       {"pid", 1},
       {"tid", 1},
       {"ts", 1010}},
  });
  return {{"schemaVersion", 1},
          {"distributedInfo", {{"backend", "nccl"}, {"rank", 1}, {"world_size", 2}}},
          {"traceEvents", events},
          {"traceName", "rank1.json"}};
}

inline nlohmann::json kineto_gpu_rank0() {
  using nlohmann::json;
  json events = json::array({
      kineto_x("user_annotation", "ProfilerStep#5", 501000, 140),
      kineto_x("cuda_runtime", "cudaLaunchKernel", 500990, 5, {{"correlation", 1}}),
      kineto_x("kernel", "sm80_gemm", 501000, 100, {{"correlation", 1}}),
      kineto_x("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 501100, 40),
  });
  return {{"schemaVersion", 1},
          {"distributedInfo", {{"backend", "nccl"}, {"rank", 0}, {"world_size", 2}}},
          {"traceEvents", events}};
}

}  // namespace mgpu::testing
