// The CPU kernels' elementwise loops, compiled once per vector width and picked when the program
// loads (function multiversioning, GCC and clang on x86-64): the baseline build may only assume
// SSE2, while the machine running it usually has AVX2 or AVX-512, 2-4x wider. Each clone performs
// the same IEEE operations on each element in the same order (the kernel files are built with
// -ffp-contract=off, so no clone fuses a multiply-add), hence the same bits on every machine.
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(thread_sanitizer)
// Sanitizers instrument one version; clones add nothing there (and under TSan the ifunc
// resolver would run, instrumented, before the sanitizer is initialised).
#define MGPU_NO_CLONES
#endif
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(MGPU_NO_CLONES)
#define MGPU_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MGPU_VECTOR_CLONES
#endif

// On the declarations in kernels.h: clang clones a function only when every declaration says so,
// while GCC would emit a second resolver in each file that includes the header.
#if defined(__clang__)
#define MGPU_VECTOR_CLONES_DECL MGPU_VECTOR_CLONES
#else
#define MGPU_VECTOR_CLONES_DECL
#endif
