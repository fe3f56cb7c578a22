// Emulated CUDA: `MGPU_CUDA_EMULATION=1` in the environment makes `--device cuda` run on the CPU,
// in every build (with or without the CUDA toolkit), so every device path of the program runs
// in CI without a GPU: dispatch through the CUDA kernel table, device copies through the memory
// hooks, the refusals. The table is filled with the CPU kernels, so an emulated cuda run computes
// the same bits as the cpu run of the same configuration.
//
// "Device" memory is host memory seen through a pointer that is NOT a valid host address (a high
// address bit set), like a real GPU's: the emulated kernels and copies translate it, and any code
// that dereferences a cuda tensor's pointer on the host crashes at once instead of passing here
// and failing on the first real GPU. The ranks are threads on the local backend, one emulated GPU
// per rank; the cuda clock (CUDA events) has nothing to time, so it is refused.
#pragma once

namespace mgpu::cuda {

// True when the environment asks for emulation (MGPU_CUDA_EMULATION set to anything but "" or
// "0"). It takes precedence over a real GPU.
bool emulation_requested();

// Installs the emulated kernel table and memory hooks for DeviceKind::cuda, replacing whatever
// was installed (cuda::install() puts the real ones back). Safe to call repeatedly: while they
// are installed it does nothing.
void install_emulation();

// True while the installed cuda table and hooks are the emulated ones.
bool emulation_installed();

// Marks the emulated table as replaced (cuda::install() calls it after installing the real one).
void emulation_uninstalled();

// The environment variable that asks for emulation.
constexpr const char* kEmulationEnv = "MGPU_CUDA_EMULATION";

}  // namespace mgpu::cuda
