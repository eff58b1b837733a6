// Thread-count settings for LibTorch's CPU backend and OpenBLAS.
//
// Set once per process, in code, before the first forward pass: LibTorch's
// OpenMP pool and OpenBLAS's own pthread pool otherwise both size themselves
// to the core count and oversubscribe (measured 5-10x slower decoding on a
// 2-core machine). ConfigureThreads is not thread-safe; call it from main()
// (or a test's setup) before any other thread runs torch work.
#ifndef LOOKAHEAD_ENGINE_MODEL_THREADING_H_
#define LOOKAHEAD_ENGINE_MODEL_THREADING_H_

#include "absl/status/status.h"

namespace lookahead::engine {

// Cores this process may run on (its CPU affinity mask; at least 1).
int AvailableCores();

// Where kernels/cpu/packed_matmul runs (AVX2 or AVX-512) the matmuls run on
// the model's own PanelPool (ModelOptions::matmul_threads), so OpenBLAS keeps
// attention's small matmuls and needs one thread; elsewhere OpenBLAS does
// the matmuls and gets the cores. Returns 1 or AvailableCores().
int DefaultBlasThreads();

struct ThreadOptions {
  // LibTorch intra-op (OpenMP) threads for element-wise ops, softmax and
  // non-BLAS kernels. Default 1: the work between matmuls is small for a
  // decode step, and OpenMP's spinning barriers convoy when another process
  // shares the cores (measured: a test 50x slower beside another).
  int intra_op_threads = 1;
  // LibTorch inter-op pool size. Default 1: the engine issues no parallel
  // graph work. Can only be set before the pool starts; a later call keeps the
  // old size (reported in the returned status only if it differs).
  int inter_op_threads = 1;
  // OpenBLAS threads. Default DefaultBlasThreads(). Pools that each want
  // every core oversubscribe them (5-10x slower decoding measured). Measured
  // on the 2-core AVX-512 machine, quiet (engine_bench, ms per decoded token):
  // OpenBLAS matmuls 1x1 26.2, 1x2 18.1 (intra x blas) with 16-token passes
  // at 92 ms; packed matmuls on 2 threads 25 ms, 16-token passes 50 ms.
  // <= 0 leaves OpenBLAS alone.
  int blas_threads = DefaultBlasThreads();
};

// Applies `options`. Returns OK iff every setting that this process supports
// was applied; OpenBLAS being absent (another BLAS linked) is not an error.
// Returns INVALID_ARGUMENT for intra/inter-op counts < 1.
absl::Status ConfigureThreads(const ThreadOptions& options);

// Returns OpenBLAS's current thread count, or -1 iff OpenBLAS is not loaded.
int BlasThreads();

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_THREADING_H_
