#include "verifysvc/api/openai_api.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "engine/text/text_stream.h"
#include "nlohmann/json.hpp"
#include "verifysvc/serving/field_error.h"

namespace lookahead::verifysvc {
namespace {

using json = nlohmann::json;

constexpr char kParamPayload[] = "lookahead.openai/param";
constexpr char kCodePayload[] = "lookahead.openai/code";

// Thrown by the depth callback and caught in ParseBody; never escapes.
struct TooDeep {};

absl::Status Invalid(absl::string_view param, absl::string_view message) {
  return WithParam(absl::InvalidArgumentError(message), param);
}

absl::Status WrongType(absl::string_view param, absl::string_view want) {
  return Invalid(param, absl::StrCat(param, " must be ", want));
}

// An error about the body as a whole: no param (null in the error object).
absl::Status BodyError(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// A client's value for a message: compact JSON, at most 40 bytes.
std::string Excerpt(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace)
      .substr(0, 40);
}

// `value` as a 64-bit integer, or the error naming `param`.
absl::StatusOr<int64_t> Int64(const json& value, absl::string_view param) {
  if (!value.is_number_integer() ||
      (value.is_number_unsigned() &&
       value.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))) {
    return Invalid(param, absl::StrCat(param, " must be a 64-bit integer; got ",
                                       Excerpt(value)));
  }
  return value.get<int64_t>();
}

// Parses `body` as one JSON object, at most kMaxJsonDepth deep.
absl::StatusOr<json> ParseBody(absl::string_view body) {
  json::parser_callback_t depth_check = [](int depth, json::parse_event_t,
                                           json&) {
    if (depth > kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  json parsed;
  try {
    parsed = json::parse(body.begin(), body.end(), depth_check);
  } catch (const TooDeep&) {
    return BodyError(absl::StrCat("the request body nests deeper than ",
                                  kMaxJsonDepth, " levels"));
  } catch (const json::exception& e) {
    return BodyError(
        absl::StrCat("the request body is not valid JSON "
                     "(UTF-8 only): ",
                     e.what()));
  }
  if (!parsed.is_object()) {
    return BodyError("the request body must be a JSON object");
  }
  return parsed;
}

// The field `key` of `body`, or null if absent or null.
const json* Field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status GetBool(const json& body, const char* key, bool* out) {
  const json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return WrongType(key, "a boolean");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status GetNumber(const json& body, absl::string_view param,
                       const char* key, double* out) {
  const json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return WrongType(param, "a number");
  *out = v->get<double>();
  return absl::OkStatus();
}

// An integer in [lo, hi], worded by OutOfRange when outside; `*set` (if
// given) says whether it was present. A field BuildRequest checks passes
// the whole 64-bit range (kMinInt, kMaxInt), so that its range is worded
// once, there.
absl::Status GetInt(const json& body, absl::string_view param, const char* key,
                    int64_t lo, int64_t hi, int64_t* out, bool* set = nullptr) {
  const json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int64_t value, Int64(*v, param));
  if (value < lo || value > hi) {
    return Invalid(
        param, OutOfRange(param, absl::StrCat("in [", lo, ", ", hi, "]"), "",
                          absl::StrCat(value))
                   .message());
  }
  *out = value;
  if (set != nullptr) *set = true;
  return absl::OkStatus();
}

constexpr int64_t kMinInt = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

absl::Status Unsupported(absl::string_view param, absl::string_view what) {
  return Invalid(param, absl::StrCat(param, " is not supported by this server",
                                     what.empty() ? "" : "; ", what));
}

// Fields OpenAI knows that this server does not implement: given with a
// value that would change the output, they are a 400, not ignored.
absl::Status RejectUnsupported(const json& body, OpenAiEndpoint endpoint) {
  int64_t n = 1;
  RETURN_IF_ERROR(GetInt(body, "n", "n", std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max(), &n));
  if (n != 1) {
    return Invalid("n", absl::StrCat("n = ", n,
                                     " is not supported: this server returns "
                                     "one choice per request; use n = 1"));
  }
  if (const json* v = Field(body, "echo")) {
    if (!v->is_boolean()) return WrongType("echo", "a boolean");
    if (v->get<bool>()) return Unsupported("echo", "");
  }
  if (const json* v = Field(body, "best_of")) {
    if (!v->is_number_integer()) return WrongType("best_of", "an integer");
    if (v->get<int64_t>() != 1) return Unsupported("best_of", "use 1");
  }
  if (const json* v = Field(body, "suffix")) {
    if (!v->is_string()) return WrongType("suffix", "a string");
    if (!v->get_ref<const std::string&>().empty()) {
      return Unsupported("suffix", "");
    }
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    double penalty = 0;
    RETURN_IF_ERROR(GetNumber(body, key, key, &penalty));
    if (penalty != 0) return Unsupported(key, "use 0");
  }
  if (const json* v = Field(body, "logit_bias")) {
    if (!v->is_object()) return WrongType("logit_bias", "an object");
    if (!v->empty()) return Unsupported("logit_bias", "");
  }
  for (const char* key : {"tools", "functions"}) {
    if (const json* v = Field(body, key)) {
      if (!v->is_array()) return WrongType(key, "an array");
      if (!v->empty()) return Unsupported(key, "");
    }
  }
  return absl::OkStatus();
}

// A message's content: a string, or an array of {"type": "text"} parts.
absl::StatusOr<std::string> MessageContent(const json& content,
                                           const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return WrongType(param, "a string or an array of text parts");
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string part_param = absl::StrCat(param, "[", i, "]");
    const json* type = part.is_object() ? Field(part, "type") : nullptr;
    const json* part_text = part.is_object() ? Field(part, "text") : nullptr;
    if (type == nullptr || !type->is_string() || *type != "text" ||
        part_text == nullptr || !part_text->is_string()) {
      return Invalid(part_param,
                     absl::StrCat(part_param,
                                  " must be {\"type\": \"text\", \"text\": "
                                  "...}; only text content is supported"));
    }
    text += part_text->get_ref<const std::string&>();
  }
  return text;
}

absl::Status ParseMessages(const json& body, RawPrompt* prompt) {
  const json* messages = Field(body, "messages");
  if (messages == nullptr) {
    return Invalid("messages",
                   "messages is required: a list of {role, "
                   "content} objects");
  }
  if (!messages->is_array()) return WrongType("messages", "an array");
  prompt->kind = RawPrompt::Kind::kChat;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string param = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(param, "an object");
    const json* role = Field(m, "role");
    if (role == nullptr || !role->is_string()) {
      return WrongType(param + ".role", "a string");
    }
    const json* content = Field(m, "content");
    if (content == nullptr) {
      return Invalid(param + ".content",
                     absl::StrCat(param, ".content is required"));
    }
    engine::ChatMessage message;
    message.role = role->get<std::string>();
    // OpenAI's newer name for the system role.
    if (message.role == "developer") message.role = "system";
    ASSIGN_OR_RETURN(message.content,
                     MessageContent(*content, param + ".content"));
    prompt->chat.push_back(std::move(message));
  }
  return absl::OkStatus();
}

// Token ids of a prompt given as a list of integers (BuildRequest checks
// them against the vocabulary).
absl::Status TokenIds(const json& ids, RawPrompt* prompt) {
  prompt->kind = RawPrompt::Kind::kTokens;
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSIGN_OR_RETURN(const int64_t id,
                     Int64(ids[i], absl::StrCat("prompt[", i, "]")));
    prompt->token_ids.push_back(id);
  }
  return absl::OkStatus();
}

// prompt: a string, a list of token ids, or a list holding one of either.
absl::Status ParsePrompt(const json& body, RawPrompt* prompt) {
  const json* p = Field(body, "prompt");
  if (p == nullptr) {
    return Invalid("prompt",
                   "prompt is required: a string or a list of token ids");
  }
  if (p->is_array() && p->size() == 1 &&
      ((*p)[0].is_string() || (*p)[0].is_array())) {
    p = &(*p)[0];  // a batch of one
  } else if (p->is_array() && !p->empty() &&
             ((*p)[0].is_string() || (*p)[0].is_array())) {
    return Invalid("prompt", absl::StrCat("prompt holds ", p->size(),
                                          " prompts; send one per request"));
  }
  if (p->is_string()) {
    prompt->kind = RawPrompt::Kind::kText;
    prompt->text = p->get<std::string>();
    return absl::OkStatus();
  }
  if (p->is_array()) return TokenIds(*p, prompt);
  return WrongType("prompt", "a string or a list of token ids");
}

absl::Status ParseStop(const json& body, std::vector<std::string>* stop) {
  const json* v = Field(body, "stop");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    stop->push_back(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) return WrongType("stop", "a string or a list of strings");
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return WrongType(absl::StrCat("stop[", i, "]"), "a string");
    }
    stop->push_back((*v)[i].get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseSources(const json& sources, RawDraftParams* draft) {
  if (!sources.is_array()) {
    return WrongType("lookahead.sources", "a list of source names");
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string param = absl::StrCat("lookahead.sources[", i, "]");
    const json& s = sources[i];
    RawDraftParams::Source source;
    if (s == "trie" || s == "prompt" || s == "output") {
      source.kind = RawDraftParams::Source::Kind::kTrie;
    } else if (s == "ngram") {
      source.kind = RawDraftParams::Source::Kind::kNgram;
    } else if (s == "assistant") {
      source.kind = RawDraftParams::Source::Kind::kAssistant;
    } else {
      return Invalid(param, absl::StrCat(param,
                                         " must be \"trie\", \"ngram\" or "
                                         "\"assistant\""));
    }
    draft->sources.push_back(source);
  }
  return absl::OkStatus();
}

// The `lookahead` extension object: the draft policy.
absl::Status ParseLookahead(const json& body, RawDraftParams* draft) {
  const json* la = Field(body, "lookahead");
  if (la == nullptr) return absl::OkStatus();
  if (!la->is_object()) return WrongType("lookahead", "an object");
  if (const json* sources = Field(*la, "sources")) {
    RETURN_IF_ERROR(ParseSources(*sources, draft));
  }
  if (const json* mode = Field(*la, "mode")) {
    if (*mode == "off") {
      draft->mode = RawDraftParams::Mode::kOff;
    } else if (*mode == "hierarchical") {
      draft->mode = RawDraftParams::Mode::kTrieHierarchical;
    } else if (*mode == "parallel") {
      draft->mode = RawDraftParams::Mode::kTrieParallel;
    } else {
      return Invalid("lookahead.mode",
                     "lookahead.mode must be \"off\", \"hierarchical\" or "
                     "\"parallel\"");
    }
  }
  if (const json* ns = Field(*la, "namespace")) {
    if (!ns->is_string()) return WrongType("lookahead.namespace", "a string");
    draft->name_space = ns->get<std::string>();
  }
  struct IntField {
    const char* key;
    int64_t* out;
  };
  // Ranges are BuildRequest's (draft.* there).
  for (const IntField& f :
       {IntField{"decoding_length", &draft->decoding_length},
        IntField{"branch_length", &draft->branch_length},
        IntField{"lookahead_ngram", &draft->lookahead_ngram},
        IntField{"lookahead_guess", &draft->lookahead_guess}}) {
    RETURN_IF_ERROR(GetInt(*la, absl::StrCat("lookahead.", f.key), f.key,
                           kMinInt, kMaxInt, f.out));
  }
  // Absent or null = the server default; 0 turns the window off.
  int64_t window = 0;
  bool window_set = false;
  RETURN_IF_ERROR(GetInt(*la, "lookahead.lookahead_window", "lookahead_window",
                         kMinInt, kMaxInt, &window, &window_set));
  if (window_set) draft->lookahead_window = window;
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& body, RawRequest* raw) {
  double temperature = 1.0;  // OpenAI's default
  RETURN_IF_ERROR(GetNumber(body, "temperature", "temperature", &temperature));
  raw->temperature = static_cast<float>(temperature);
  double top_p = 0;
  RETURN_IF_ERROR(GetNumber(body, "top_p", "top_p", &top_p));
  raw->top_p = static_cast<float>(top_p);
  // An extension vLLM and llama.cpp also take; BuildRequest checks it.
  RETURN_IF_ERROR(
      GetInt(body, "top_k", "top_k", kMinInt, kMaxInt, &raw->top_k));
  int64_t seed = 0;
  RETURN_IF_ERROR(GetInt(body, "seed", "seed",
                         std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max(), &seed));
  raw->seed = static_cast<uint64_t>(seed);
  return absl::OkStatus();
}

// max_completion_tokens (OpenAI's newer name) wins over max_tokens. Any
// 64-bit value is passed on: BuildRequest words the range, [1, the context
// left], so an explicit 0 is an error as in OpenAI.
absl::Status ParseMaxTokens(const json& body, OpenAiEndpoint endpoint,
                            OpenAiRequest* request) {
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    int64_t max_tokens = 0;
    bool set = false;
    RETURN_IF_ERROR(
        GetInt(body, key, key, kMinInt, kMaxInt, &max_tokens, &set));
    if (set) {
      request->raw.max_new_tokens = max_tokens;
      request->max_tokens_key = key;
      return absl::OkStatus();
    }
  }
  if (endpoint == OpenAiEndpoint::kCompletions) {
    request->raw.max_new_tokens = kDefaultCompletionsMaxTokens;
  }
  return absl::OkStatus();
}

absl::Status CheckModel(const json& body, absl::string_view model_name) {
  const json* model = Field(body, "model");
  if (model == nullptr) {
    return Invalid("model", absl::StrCat("model is required; this server "
                                         "serves \"",
                                         model_name, "\""));
  }
  if (!model->is_string()) return WrongType("model", "a string");
  if (*model != std::string(model_name)) {
    return WithErrorCode(
        WithParam(absl::NotFoundError(absl::StrCat(
                      "the model \"", model->get<std::string>().substr(0, 128),
                      "\" does not exist; this server serves \"", model_name,
                      "\" (GET /v1/models)")),
                  "model"),
        "model_not_found");
  }
  return absl::OkStatus();
}

// response_format: only {"type": "text"}, the default. The JSON modes
// would change the output, so they are a 400, not ignored.
absl::Status ParseResponseFormat(const json& body) {
  const json* format = Field(body, "response_format");
  if (format == nullptr) return absl::OkStatus();
  if (!format->is_object()) return WrongType("response_format", "an object");
  const json* type = Field(*format, "type");
  if (type == nullptr || !type->is_string()) {
    return WrongType("response_format.type", "a string");
  }
  if (*type != "text") {
    return Invalid("response_format.type",
                   absl::StrCat("response_format.type ", Excerpt(*type),
                                " is not supported by this server; use "
                                "\"text\" (JSON modes are not implemented)"));
  }
  return absl::OkStatus();
}

// Chat: logprobs (a boolean) and top_logprobs (alternatives per token,
// only with logprobs: true; 0 without it asks for nothing, as in vLLM).
// Completions: logprobs, the number of alternatives (false = unset; OpenAI
// caps it at 5, this server at engine::kMaxTopLogprobs as chat's
// top_logprobs); top_logprobs is chat's, beyond 0 a 400 here. Ranges are
// worded by CheckLogprobs, as over gRPC.
absl::Status ParseLogprobs(const json& body, OpenAiEndpoint endpoint,
                           RawRequest* raw) {
  int64_t top = 0;
  bool top_set = false;
  RETURN_IF_ERROR(GetInt(body, "top_logprobs", "top_logprobs", kMinInt, kMaxInt,
                         &top, &top_set));
  const json* v = Field(body, "logprobs");
  if (endpoint == OpenAiEndpoint::kCompletions) {
    if (top_set && top != 0) {
      return Invalid("top_logprobs",
                     "top_logprobs is a /v1/chat/completions parameter; on "
                     "/v1/completions set logprobs to the number of "
                     "alternatives per token");
    }
    if (v == nullptr || (v->is_boolean() && !v->get<bool>())) {
      return absl::OkStatus();
    }
    if (!v->is_number_integer()) {
      return WrongType("logprobs", "an integer (alternatives per token)");
    }
    int64_t n = 0;
    RETURN_IF_ERROR(GetInt(body, "logprobs", "logprobs", kMinInt, kMaxInt, &n));
    if (absl::Status s = CheckLogprobs(n, "logprobs"); !s.ok()) {
      return WithParam(s, "logprobs");
    }
    raw->logprobs = n;
    return absl::OkStatus();
  }
  bool on = false;
  RETURN_IF_ERROR(GetBool(body, "logprobs", &on));
  if (!top_set) {
    if (on) raw->logprobs = 0;
    return absl::OkStatus();
  }
  if (absl::Status s = CheckLogprobs(top, "top_logprobs"); !s.ok()) {
    return WithParam(s, "top_logprobs");
  }
  if (!on && top != 0) {
    return Invalid("top_logprobs", absl::StrCat("top_logprobs = ", top,
                                                " needs logprobs: true"));
  }
  if (on) raw->logprobs = top;
  return absl::OkStatus();
}

absl::Status ParseStream(const json& body, OpenAiRequest* request) {
  RETURN_IF_ERROR(GetBool(body, "stream", &request->stream));
  if (const json* options = Field(body, "stream_options")) {
    if (!options->is_object()) return WrongType("stream_options", "an object");
    if (const json* usage = Field(*options, "include_usage")) {
      if (!usage->is_boolean()) {
        return WrongType("stream_options.include_usage", "a boolean");
      }
      request->include_usage = usage->get<bool>();
    }
  }
  return absl::OkStatus();
}

// A gRPC request field path's leading part and its OpenAI name; what
// follows (indices, subfields) is kept. max_new_tokens is the key the
// client used (OpenAiRequest::max_tokens_key).
struct Rename {
  const char* from;  // a whole component, or a prefix ending in '.'
  const char* to;
};
constexpr Rename kRenames[] = {
    {"sampling.", ""},  {"chat.messages", "messages"}, {"tokens.ids", "prompt"},
    {"text", "prompt"}, {"draft.", "lookahead."},
};

// The OpenAI param of a BuildRequest field path (ErrorField).
std::string OpenAiPath(const std::string& field, const OpenAiRequest& request) {
  if (field == "max_new_tokens") return request.max_tokens_key;
  for (const Rename& r : kRenames) {
    const absl::string_view from(r.from);
    if (!absl::StartsWith(field, from)) continue;
    const absl::string_view rest = absl::string_view(field).substr(from.size());
    if (from.back() == '.' || rest.empty() || rest[0] == '.' ||
        rest[0] == '[') {
      return absl::StrCat(r.to, rest);
    }
  }
  return field;
}

const char* FinishName(FinishReason finish) {
  return finish == FinishReason::kLength ? "length" : "stop";
}

json UsageJson(const Usage& u) {
  json sources = json::array();
  for (const SourceUsage& s : u.sources) {
    sources.push_back({{"source", engine::DraftSourceName(s.source)},
                       {"draft_tokens", s.draft_tokens},
                       {"accepted_draft_tokens", s.accepted_draft_tokens}});
  }
  return {
      {"prompt_tokens", u.prompt_tokens},
      {"completion_tokens", u.output_tokens},
      {"total_tokens", u.prompt_tokens + u.output_tokens},
      {"lookahead",
       {{"edl", u.edl},
        {"decoding_steps", u.decoding_steps},
        {"draft_tokens", u.draft_tokens},
        {"accepted_draft_tokens", u.accepted_draft_tokens},
        {"cached_prompt_tokens", u.cached_prompt_tokens},
        {"time_to_first_token_seconds", u.time_to_first_token_seconds},
        {"sources", std::move(sources)}}},
      // OpenAI's name for the prefix cache's hits.
      {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
}

// A logprob for JSON, which has no -infinity: OpenAI's floor, -9999.
double JsonLogprob(float logprob) {
  return std::isfinite(logprob) ? static_cast<double>(logprob) : -9999.0;
}

// A token's text for logprobs: its bytes with special tokens spelled out,
// a cut UTF-8 character as U+FFFD; "token_id:N" without a tokenizer (as
// vLLM's --return-tokens-as-token-ids).
std::string TokenString(const engine::Tokenizer* tokenizer, int32_t id) {
  if (tokenizer == nullptr) return absl::StrCat("token_id:", id);
  return engine::SanitizeUtf8(tokenizer->TokenBytes(id));
}

// Chat's {"token", "logprob", "bytes"}: bytes are the token's raw bytes
// (null without a tokenizer).
json ChatToken(const engine::Tokenizer* tokenizer,
               const engine::TokenLogprob& t) {
  json bytes = nullptr;
  if (tokenizer != nullptr) {
    bytes = json::array();
    for (unsigned char c : tokenizer->TokenBytes(t.token)) {
      bytes.push_back(static_cast<int>(c));
    }
  }
  return {{"token", TokenString(tokenizer, t.token)},
          {"logprob", JsonLogprob(t.logprob)},
          {"bytes", std::move(bytes)}};
}

// choices[0].logprobs of a chat completion: {"content": [{"token",
// "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
json ChatLogprobs(const engine::Tokenizer* tokenizer,
                  absl::Span<const engine::ChoiceLogprobs> logprobs) {
  json content = json::array();
  for (const engine::ChoiceLogprobs& l : logprobs) {
    json entry = ChatToken(tokenizer, l.chosen);
    json top = json::array();
    for (const engine::TokenLogprob& t : l.top) {
      top.push_back(ChatToken(tokenizer, t));
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

// choices[0].logprobs of a text completion: {"tokens", "token_logprobs",
// "top_logprobs": [{token: logprob}], "text_offset"}. text_offset counts
// the characters (code points) of the completion's text before each token;
// `*offset` is that count before the first and is advanced past the last.
// Special tokens add no text; a character cut across tokens counts at the
// token holding its first byte.
json CompletionLogprobs(const engine::Tokenizer* tokenizer,
                        absl::Span<const engine::ChoiceLogprobs> logprobs,
                        int64_t* offset) {
  json tokens = json::array(), token_logprobs = json::array(),
       top_logprobs = json::array(), text_offset = json::array();
  for (const engine::ChoiceLogprobs& l : logprobs) {
    tokens.push_back(TokenString(tokenizer, l.chosen.token));
    token_logprobs.push_back(JsonLogprob(l.chosen.logprob));
    json top = json::object();
    for (const engine::TokenLogprob& t : l.top) {
      // Two tokens of one spelling: the likelier one's value.
      top.emplace(TokenString(tokenizer, t.token), JsonLogprob(t.logprob));
    }
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(*offset);
    if (tokenizer == nullptr) continue;
    for (unsigned char c : tokenizer->TokenBytes(l.chosen.token,
                                                 /*render_special=*/false)) {
      if ((c & 0xC0) != 0x80) ++*offset;  // not a continuation byte
    }
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

// choices[0].logprobs for `endpoint`: null without logprobs.
json LogprobsJson(OpenAiEndpoint endpoint, const engine::Tokenizer* tokenizer,
                  absl::Span<const engine::ChoiceLogprobs> logprobs,
                  int64_t* offset) {
  if (logprobs.empty()) return nullptr;
  return endpoint == OpenAiEndpoint::kChatCompletions
             ? ChatLogprobs(tokenizer, logprobs)
             : CompletionLogprobs(tokenizer, logprobs, offset);
}

// Text from the model is valid UTF-8 (the output processor holds back cut
// characters); replace keeps a bad byte from throwing all the same.
std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Event(const json& value) {
  return absl::StrCat("data: ", Dump(value), "\n\n");
}

}  // namespace

absl::Status WithParam(absl::Status status, absl::string_view param) {
  status.SetPayload(kParamPayload, absl::Cord(param));
  return status;
}

std::string OpenAiParam(const absl::Status& status) {
  auto param = status.GetPayload(kParamPayload);
  return param.has_value() ? std::string(*param) : "";
}

absl::Status WithErrorCode(absl::Status status, absl::string_view code) {
  status.SetPayload(kCodePayload, absl::Cord(code));
  return status;
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint,
                                                 absl::string_view body,
                                                 absl::string_view model_name) {
  ASSIGN_OR_RETURN(json parsed, ParseBody(body));
  OpenAiRequest request;
  request.endpoint = endpoint;
  RETURN_IF_ERROR(CheckModel(parsed, model_name));
  RETURN_IF_ERROR(endpoint == OpenAiEndpoint::kChatCompletions
                      ? ParseMessages(parsed, &request.raw.prompt)
                      : ParsePrompt(parsed, &request.raw.prompt));
  RETURN_IF_ERROR(RejectUnsupported(parsed, endpoint));
  RETURN_IF_ERROR(ParseResponseFormat(parsed));
  RETURN_IF_ERROR(ParseMaxTokens(parsed, endpoint, &request));
  RETURN_IF_ERROR(ParseSampling(parsed, &request.raw));
  RETURN_IF_ERROR(ParseStop(parsed, &request.raw.stop));
  RETURN_IF_ERROR(ParseStream(parsed, &request));
  RETURN_IF_ERROR(ParseLogprobs(parsed, endpoint, &request.raw));
  RETURN_IF_ERROR(ParseLookahead(parsed, &request.raw.draft));
  if (const json* user = Field(parsed, "user"); user && !user->is_string()) {
    return WrongType("user", "a string");
  }
  return request;
}

absl::Status ToOpenAiError(const absl::Status& status,
                           const OpenAiRequest& request) {
  const std::string field = ErrorField(status);
  if (field.empty() || status.GetPayload(kParamPayload).has_value()) {
    return status;
  }
  const std::string param = OpenAiPath(field, request);
  std::string message(status.message());
  // FieldError's message begins with its field.
  if (absl::StartsWith(message, field)) {
    message = absl::StrCat(param, message.substr(field.size()));
  }
  return WithParam(absl::Status(status.code(), message), param);
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

std::string HttpErrorJson(int http_status, absl::string_view message,
                          absl::string_view param, absl::string_view code) {
  const char* type = "server_error";
  switch (http_status) {
    case 400:
    case 405:
    case 413:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "service_unavailable";
      break;
  }
  json error = {{"message", std::string(message)},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", code.empty() ? json(nullptr) : json(code)}};
  return Dump({{"error", std::move(error)}});
}

std::string ErrorJson(const absl::Status& status) {
  auto code = status.GetPayload(kCodePayload);
  return HttpErrorJson(HttpStatusOf(status), status.message(),
                       OpenAiParam(status),
                       code.has_value() ? std::string(*code) : "");
}

std::string ModelsJson(absl::string_view model_name, int64_t created) {
  json model = {{"id", std::string(model_name)},
                {"object", "model"},
                {"created", created},
                {"owned_by", "lookahead"}};
  return Dump({{"object", "list"}, {"data", json::array({std::move(model)})}});
}

OpenAiResponder::OpenAiResponder(OpenAiEndpoint endpoint, std::string id,
                                 int64_t created, std::string model,
                                 bool include_usage,
                                 const engine::Tokenizer* tokenizer)
    : endpoint_(endpoint),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model)),
      include_usage_(include_usage),
      tokenizer_(tokenizer) {}

std::string OpenAiResponder::Chunk(
    const std::string& text, const char* finish,
    absl::Span<const engine::ChoiceLogprobs> logprobs) {
  json choice = {{"index", 0},
                 {"finish_reason", finish ? json(finish) : json(nullptr)},
                 {"logprobs", LogprobsJson(endpoint_, tokenizer_, logprobs,
                                           &text_offset_)}};
  const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
  if (chat) {
    choice["delta"] =
        text.empty() && finish ? json::object() : json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  json chunk = {{"id", id_},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"choices", json::array({std::move(choice)})}};
  if (include_usage_) chunk["usage"] = nullptr;
  return Event(chunk);
}

std::string OpenAiResponder::UsageChunk() const {
  const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
  return Event({{"id", id_},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"choices", json::array()},
                {"usage", UsageJson(usage_)}});
}

std::string OpenAiResponder::StreamStart() {
  if (endpoint_ != OpenAiEndpoint::kChatCompletions) return "";
  json choice = {{"index", 0},
                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                 {"finish_reason", nullptr},
                 {"logprobs", nullptr}};
  json chunk = {{"id", id_},
                {"object", "chat.completion.chunk"},
                {"created", created_},
                {"model", model_},
                {"choices", json::array({std::move(choice)})}};
  if (include_usage_) chunk["usage"] = nullptr;
  return Event(chunk);
}

std::string OpenAiResponder::StreamOutput(const GenerationOutput& output) {
  std::string events;
  // Tokens whose text is held back still send their logprobs.
  if (!output.text.empty() || !output.logprobs.empty()) {
    events += Chunk(output.text, nullptr, output.logprobs);
  }
  if (output.finish_reason != FinishReason::kNone) {
    events += Chunk("", FinishName(output.finish_reason));
    if (output.usage.has_value()) usage_ = *output.usage;
    if (include_usage_) events += UsageChunk();
  }
  return events;
}

std::string OpenAiResponder::StreamEnd() { return "data: [DONE]\n\n"; }

std::string OpenAiResponder::StreamError(const absl::Status& status) {
  return absl::StrCat("data: ", ErrorJson(status), "\n\n");
}

void OpenAiResponder::Add(const GenerationOutput& output) {
  text_ += output.text;
  logprobs_.insert(logprobs_.end(), output.logprobs.begin(),
                   output.logprobs.end());
  if (output.finish_reason != FinishReason::kNone) {
    finish_ = output.finish_reason;
  }
  if (output.usage.has_value()) usage_ = *output.usage;
}

std::string OpenAiResponder::Body() const {
  const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
  int64_t offset = 0;
  json choice = {
      {"index", 0},
      {"finish_reason", FinishName(finish_)},
      {"logprobs", LogprobsJson(endpoint_, tokenizer_, logprobs_, &offset)}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  } else {
    choice["text"] = text_;
  }
  return Dump({{"id", id_},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", model_},
               {"choices", json::array({std::move(choice)})},
               {"usage", UsageJson(usage_)}});
}

std::string NewResponseId(absl::string_view prefix) {
  thread_local absl::BitGen gen;
  return absl::StrCat(prefix,
                      absl::StrFormat("%016x%08x", absl::Uniform<uint64_t>(gen),
                                      absl::Uniform<uint32_t>(gen)));
}

}  // namespace lookahead::verifysvc
