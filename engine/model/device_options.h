// Parses the --device and --dtype flags that verifysvc and its benchmarks
// share into ModelOptions. Pure functions; thread-safe.
#ifndef LOOKAHEAD_ENGINE_MODEL_DEVICE_OPTIONS_H_
#define LOOKAHEAD_ENGINE_MODEL_DEVICE_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/model/llama_model.h"

namespace lookahead::engine {

// device: "cpu", "cuda" or "cuda:N"; dtype: "float32", "bfloat16" or
// "float16" (an empty dtype means float32). Sets options->device and
// options->dtype. INVALID_ARGUMENT naming the flag for an unknown value;
// FAILED_PRECONDITION iff CUDA is asked for and this build or machine has
// none (the message says how to get the CUDA build).
absl::Status ParseDeviceOptions(absl::string_view device,
                                absl::string_view dtype, ModelOptions* options);

// "float32", "bfloat16" or "float16", as --dtype spells them.
std::string DtypeName(const ModelOptions& options);
// "cpu", "cuda:0", ...
std::string DeviceName(const ModelOptions& options);
// "cpu float32", "cuda:0 bfloat16", ...: for logs and reports.
std::string DescribeDevice(const ModelOptions& options);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_MODEL_DEVICE_OPTIONS_H_
