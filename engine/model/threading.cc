#include "engine/model/threading.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sched.h>

#include "absl/strings/str_cat.h"
#include "engine/model/torch_status.h"
#include "kernels/cpu/packed_matmul.h"

namespace lookahead::engine {
namespace {

using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();

// OpenBLAS is a dependency of libtorch_cpu on Debian, so its symbols are in
// the global namespace once torch is loaded; looked up at run time so that a
// build against another BLAS still links.
SetThreadsFn FindBlasSetter() {
  return reinterpret_cast<SetThreadsFn>(
      dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
}
GetThreadsFn FindBlasGetter() {
  return reinterpret_cast<GetThreadsFn>(
      dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
}

}  // namespace

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int cores = CPU_COUNT(&set);
  return cores > 0 ? cores : 1;
}

int DefaultBlasThreads() {
  return kernels::BestPackedIsa() != kernels::PackedIsa::kNone
             ? 1
             : AvailableCores();
}

absl::Status ConfigureThreads(const ThreadOptions& options) {
  if (options.intra_op_threads < 1 || options.inter_op_threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "thread counts must be >= 1, got intra_op=", options.intra_op_threads,
        " inter_op=", options.inter_op_threads));
  }
  absl::Status status = TorchStatus("at::set_num_threads", [&] {
    at::set_num_threads(options.intra_op_threads);
  });
  if (!status.ok()) return status;
  if (at::get_num_interop_threads() != options.inter_op_threads) {
    // Throws once the inter-op pool has started; that is not fatal.
    absl::Status interop = TorchStatus("at::set_num_interop_threads", [&] {
      at::set_num_interop_threads(options.inter_op_threads);
    });
    if (!interop.ok() &&
        at::get_num_interop_threads() != options.inter_op_threads) {
      return absl::FailedPreconditionError(absl::StrCat(
          "inter-op pool already started with ", at::get_num_interop_threads(),
          " threads; wanted ", options.inter_op_threads));
    }
  }
  if (options.blas_threads > 0) {
    if (SetThreadsFn set = FindBlasSetter(); set != nullptr) {
      set(options.blas_threads);
    }
  }
  return absl::OkStatus();
}

int BlasThreads() {
  GetThreadsFn get = FindBlasGetter();
  return get == nullptr ? -1 : get();
}

}  // namespace lookahead::engine
