// Element loads and stores for the kernels' DTypes: float32, float16 and
// bfloat16 storage, float32 arithmetic. Device-side helpers only.
#ifndef LOOKAHEAD_KERNELS_CUDA_DTYPE_CUH_
#define LOOKAHEAD_KERNELS_CUDA_DTYPE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/tree_batch.h"

namespace lookahead::kernels::cuda {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Calls fn(T{}) with T the storage type of `dtype` (a tag to deduce T);
// returns cudaErrorInvalidValue for an unknown dtype.
template <typename Fn>
cudaError_t DispatchDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat16:
      return fn(__half{});
    case DType::kBFloat16:
      return fn(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace lookahead::kernels::cuda

#endif  // LOOKAHEAD_KERNELS_CUDA_DTYPE_CUH_
