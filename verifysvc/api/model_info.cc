#include "verifysvc/api/model_info.h"

#include "absl/strings/str_cat.h"
#include "engine/model/device_options.h"

namespace lookahead::verifysvc {

std::string FileTypeName(uint32_t type) {
  // llama.cpp's LLAMA_FTYPE values (general.file_type).
  switch (type) {
    case 0:
      return "F32";
    case 1:
      return "F16";
    case 2:
      return "Q4_0";
    case 3:
      return "Q4_1";
    case 7:
      return "Q8_0";
    case 8:
      return "Q5_0";
    case 9:
      return "Q5_1";
    case 10:
      return "Q2_K";
    case 12:
      return "Q3_K_M";
    case 15:
      return "Q4_K_M";
    case 17:
      return "Q5_K_M";
    case 18:
      return "Q6_K";
    case 32:
      return "BF16";
    default:
      return absl::StrCat("type ", type);
  }
}

std::string ModelName(const engine::GgufFile& file, const std::string& path) {
  std::string name = file.GetStringOr("general.name", "").value_or("");
  if (name.empty()) name = path.substr(path.rfind('/') + 1);
  return name;
}

lookahead::v1::ModelInfoResponse MakeModelInfo(
    const engine::GgufFile& file, const std::string& path,
    const engine::LlamaModel& model, const engine::Tokenizer& tokenizer,
    const RequestLimits& limits) {
  const engine::ModelConfig& config = model.config();
  lookahead::v1::ModelInfoResponse info;
  info.set_name(ModelName(file, path));
  info.set_architecture(config.architecture);
  info.set_vocab_size(config.vocab_size);
  info.set_context_length(limits.max_context_tokens);
  info.set_bos_token_id(tokenizer.bos_id());
  info.set_eos_token_id(tokenizer.eos_id());
  info.set_dtype(engine::DtypeName(model.options()));
  info.set_device(engine::DeviceName(model.options()));
  info.set_model_file(path);
  info.set_file_type(
      FileTypeName(file.GetUint32Or("general.file_type", 0).value_or(0)));
  info.set_max_new_tokens(limits.default_max_new_tokens);
  info.set_max_prompt_tokens(limits.max_prompt_tokens);
  return info;
}

}  // namespace lookahead::verifysvc
