// `mgpu calibrate [--device cuda|cpu] [--out profile.json]`: measures this machine's GPU (cuBLAS
// SGEMM 4096^3, device copy bandwidth, empty-kernel launch overhead, memory capacity) or, with
// --device cpu, this host as the virtual GPUs run on it (lessons/calibrate_cpu.h), and writes the
// numbers as a HardwareProfile JSON that `--profile FILE` reads back. cuda without a GPU: one
// line, exit 2.
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/ops/cuda_emulation.h"
#include "core/ops/cuda_module.h"
#include "core/runtime/allocator.h"
#include "core/runtime/gpu.h"
#include "core/runtime/output_file.h"
#include "lessons/calibrate_cpu.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

// The profile JSON, written whole or not at all (a full disk is an error, not "wrote").
void write_profile(const std::string& path, const nlohmann::json& profile) {
  const std::string text = profile.dump(2) + "\n";
  write_file_atomically(path, "--out",
                        [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
}

}  // namespace

int cmd_calibrate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app("measure this GPU and write a HardwareProfile", "mgpu calibrate");
  std::string path = "profile.json";
  std::string device = "cuda";
  app.add_option("--out", path, "where to write the profile JSON")
      ->check(OutputFile)  // before any measuring: a device, fifo or unwritable folder is refused
      ->capture_default_str();
  app.add_option("--device", device, "what to measure: this GPU (cuda) or this host's CPU (cpu)")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    fmt::print(err, "mgpu calibrate: error: {}\n", e.what());
    return 2;
  }
  if (device == "cpu") {
    fmt::print(out, "calibrating this host's CPU (the virtual GPUs) ...\n");
    const nlohmann::json profile = calibrate_cpu(out).profile.to_json();
    try {
      write_profile(path, profile);
    } catch (const std::invalid_argument& e) {
      fmt::print(err, "mgpu calibrate: error: {}\n", e.what());
      return 2;
    }
    fmt::print(out, "wrote {} (use it with --clock modeled --profile {})\n", path, path);
    return 0;
  }
  if (cuda::emulation_requested()) {  // cuda on the CPU: no GPU to measure
    fmt::print(err,
               "mgpu calibrate: error: {}=1 emulates cuda on the CPU, there is no GPU to "
               "measure: unset it, or use --device cpu\n",
               cuda::kEmulationEnv);
    return 2;
  }
  if (!cuda::built_with_cuda()) {
    fmt::print(err,
               "mgpu calibrate: error: this build has no CUDA support (rebuild with the CUDA "
               "toolkit); the modeled clock uses the presets of `mgpu profiles`\n");
    return 2;
  }
  if (!cuda::install()) {
    fmt::print(err, "mgpu calibrate: error: no CUDA GPU found (cudaGetDeviceCount reports none)\n");
    return 2;
  }
  try {
    fmt::print(out, "calibrating {} ...\n", cuda::device_name(0));
    cuda::Calibration cal = cuda::calibrate();
    fmt::print(out, "  GEMM (cuBLAS SGEMM 4096^3, fp32) : {:8.1f} TFLOP/s\n", cal.gemm_tflops);
    fmt::print(out, "  device copy bandwidth            : {:8.0f} GB/s (read + write)\n",
               cal.copy_gbps);
    fmt::print(out, "  kernel launch overhead           : {:8.2f} us\n", cal.launch_us);
    fmt::print(out, "  memory capacity                  : {:>10}\n",
               format_bytes(cal.memory_bytes));
    write_profile(path, cal.profile.to_json());
    fmt::print(out, "wrote {} (use it with --profile {}; links are not measured, edit them)\n",
               path, path);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(err, "mgpu calibrate: failed: {}\n", e.what());
    return 1;
  }
}

}  // namespace mgpu::lessons
