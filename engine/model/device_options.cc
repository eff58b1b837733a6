#include "engine/model/device_options.h"

#include <torch/cuda.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace lookahead::engine {

absl::Status ParseDeviceOptions(absl::string_view device,
                                absl::string_view dtype,
                                ModelOptions* options) {
  if (dtype.empty() || dtype == "float32") {
    options->dtype = torch::kFloat32;
  } else if (dtype == "bfloat16") {
    options->dtype = torch::kBFloat16;
  } else if (dtype == "float16") {
    options->dtype = torch::kFloat16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype=", dtype, ": expected float32, bfloat16 or float16"));
  }
  if (device == "cpu") {
    options->device = torch::kCPU;
    return absl::OkStatus();
  }
  absl::string_view rest = device;
  if (!absl::ConsumePrefix(&rest, "cuda")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": expected cpu, cuda or cuda:N"));
  }
  int index = 0;
  if (!rest.empty() && (!absl::ConsumePrefix(&rest, ":") ||
                        !absl::SimpleAtoi(rest, &index) || index < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": expected cpu, cuda or cuda:N"));
  }
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=", device,
        ": no CUDA device visible to this build (the CUDA build comes from "
        "tools/cuda_build.sh and needs a GPU)"));
  }
  if (index >= static_cast<int>(torch::cuda::device_count())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": only ",
                     torch::cuda::device_count(), " CUDA devices"));
  }
  options->device = torch::Device(torch::kCUDA, index);
  return absl::OkStatus();
}

std::string DtypeName(const ModelOptions& options) {
  return options.dtype == torch::kBFloat16  ? "bfloat16"
         : options.dtype == torch::kFloat16 ? "float16"
                                            : "float32";
}

std::string DeviceName(const ModelOptions& options) {
  return options.device.str();
}

std::string DescribeDevice(const ModelOptions& options) {
  return absl::StrCat(DeviceName(options), " ", DtypeName(options));
}

}  // namespace lookahead::engine
