// Thread-count settings for LibTorch's CPU backend and OpenBLAS.
//
// Set once per process, in code, before the first forward pass: LibTorch's
// OpenMP pool and OpenBLAS's own pthread pool otherwise both size themselves
// to the core count and oversubscribe (measured 5-10x slower decoding on a
// 2-core machine). ConfigureThreads is not thread-safe; call it from main()
// (or a test's setup) before any other thread runs torch work.
#ifndef LOOKAHEAD_VERIFYSVC_THREADING_H_
#define LOOKAHEAD_VERIFYSVC_THREADING_H_

#include "absl/status/status.h"

namespace lookahead {
namespace verifysvc {

// Cores this process may run on (its CPU affinity mask; at least 1).
int AvailableCores();

struct ThreadOptions {
  // LibTorch intra-op (OpenMP) threads for element-wise ops, softmax and
  // non-BLAS kernels. Default 1: the work between matmuls is tiny for a
  // one-token decode and OpenMP fork/join costs more than it saves.
  int intra_op_threads = 1;
  // LibTorch inter-op pool size. Default 1: the engine issues no parallel
  // graph work. Can only be set before the pool starts; a later call keeps the
  // old size (reported in the returned status only if it differs).
  int inter_op_threads = 1;
  // OpenBLAS threads for the matmuls, which dominate decoding time. Default:
  // one per core this process may run on (AvailableCores()), so the BLAS pool
  // owns the machine and nothing else spins beside it. Measured on the 2-core
  // machine, quiet (engine_bench, ms per decoded token, intra x blas): 1x1
  // 26.2, 1x2 18.1. When another process keeps a core busy a second BLAS
  // thread loses (1x1 28-55 vs 1x2 28-70 on a loaded machine): give a
  // service its cores (Kubernetes CPU requests) rather than fewer threads.
  // <= 0 leaves OpenBLAS alone.
  int blas_threads = AvailableCores();
};

// Applies `options`. Returns OK iff every setting that this process supports
// was applied; OpenBLAS being absent (another BLAS linked) is not an error.
// Returns INVALID_ARGUMENT for intra/inter-op counts < 1.
absl::Status ConfigureThreads(const ThreadOptions& options);

// Returns OpenBLAS's current thread count, or -1 iff OpenBLAS is not loaded.
int BlasThreads();

}  // namespace verifysvc
}  // namespace lookahead

#endif  // LOOKAHEAD_VERIFYSVC_THREADING_H_
