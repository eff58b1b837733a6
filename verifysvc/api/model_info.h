// MakeModelInfo: what GenerationService.ModelInfo reports, from what was
// actually loaded (name, file type, dtype and device in use, limits).
#ifndef LOOKAHEAD_VERIFYSVC_API_MODEL_INFO_H_
#define LOOKAHEAD_VERIFYSVC_API_MODEL_INFO_H_

#include <cstdint>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/model/llama_model.h"
#include "engine/text/tokenizer.h"
#include "proto/generation.pb.h"
#include "verifysvc/serving/request_builder.h"

namespace lookahead::verifysvc {

// llama.cpp's name of a general.file_type value ("Q4_1", "F16", ...).
std::string FileTypeName(uint32_t type);

// The model's name: general.name, else the file's base name.
std::string ModelName(const engine::GgufFile& file, const std::string& path);

lookahead::v1::ModelInfoResponse MakeModelInfo(
    const engine::GgufFile& file, const std::string& path,
    const engine::LlamaModel& model, const engine::Tokenizer& tokenizer,
    const RequestLimits& limits);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_API_MODEL_INFO_H_
