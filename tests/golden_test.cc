// Golden test: our tokenizer and model against reference outputs that HF
// transformers computed on the same GGUF file (tests/golden/<model>.json,
// written by tools/make_golden.sh --model=NAME; layout in tests/golden.proto).
// $LOOKAHEAD_GOLDEN_MODEL picks the model (kGoldenSpecs; tests/BUILD sets it
// per target): SmolLM2-135M Q4_1, the embedded default, by default.
//
// Checks, for every golden prompt:
//   - the tokenizer gives HF's ids (plus tokenizer-only cases), and the chat
//     template renders the same text (a default system message included) as
//     HF's Jinja template, and EncodeChat gives HF's ids for it;
//   - the model, fed HF's prompt ids, gives first-step logits within
//     kLogitTolerance of HF's (32 probe ids, argmax, top-5), the same top-5
//     logits over the first 8 greedy steps, and the same num_greedy greedy
//     tokens (raw argmax, no EOS stop): every 4th case decodes them one at a
//     time; the others, after 8 steps, verify HF's continuation as one chain
//     (the draft-verification path), which is equivalent and faster.
// Needs the model: SmolLM2 fails without it (tools/setup.sh always fetches
// it); an opt-in model skips unless tools/setup.sh --model=NAME fetched it.

#include <google/protobuf/util/json_util.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/model_files.h"
#include "engine/model/kv_cache.h"
#include "engine/model/llama_model.h"
#include "engine/model/sampler.h"
#include "engine/model/threading.h"
#include "engine/testing/engine_test_util.h"
#include "engine/text/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/golden.pb.h"

namespace lookahead {
namespace {

using ::lookahead::engine::GgufFile;
using ::lookahead::engine::KvCache;
using ::lookahead::engine::LlamaModel;
using ::lookahead::engine::ModelOptions;
using ::lookahead::engine::Tokenizer;
using ::lookahead::engine::TreeInput;
using ::lookahead::golden::GoldenFile;
using ::lookahead::golden::ModelCase;

// One golden file and the model it was made from.
struct GoldenSpec {
  const char* model;        // tools/models.sh's name (--model=NAME)
  const char* model_file;   // its file in the model cache
  const char* golden_path;  // the golden JSON, relative to the workspace
  int min_cases;            // model cases in the file, at least
  int min_chats;            // of which chat cases, at least
  int min_tokenizer_cases;  // tokenizer-only cases, at least
  int num_greedy;           // greedy tokens per case
  // false: the model is always there (tools/setup.sh), a missing file
  // fails; true: opt-in, the test skips without it.
  bool opt_in;
};

constexpr GoldenSpec kGoldenSpecs[] = {
    {"smollm2-135m", engine::kDefaultModelFile,
     "tests/golden/smollm2_q4_1.json", 20, 3, 10, 64, false},
    {"qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
     "tests/golden/qwen2.5-coder-1.5b_q4_k_m.json", 5, 3, 10, 32, true},
};

// Max |ours - HF| for a float32 logit (logits here are O(10-20)), for every
// model: measured 5e-5 (SmolLM2, 30 layers) and 3e-5 (Qwen2.5-Coder-1.5B, 28
// layers), well under the smallest top-2 margin of a greedy step (0.004 and
// 0.02).
constexpr float kLogitTolerance = 1e-3f;
constexpr int kTopSteps = 8;
constexpr int kNumProbes = 32;
// Every kFullDecodeEvery-th case decodes all its greedy tokens one at a time;
// the others switch to one chain forward after kTopSteps (see CheckCase).
constexpr int kFullDecodeEvery = 4;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The spec $LOOKAHEAD_GOLDEN_MODEL names (default smollm2-135m), or null.
const GoldenSpec* SelectedSpec() {
  std::string name = Env("LOOKAHEAD_GOLDEN_MODEL");
  if (name.empty()) name = "smollm2-135m";
  for (const GoldenSpec& spec : kGoldenSpecs) {
    if (name == spec.model) return &spec;
  }
  return nullptr;
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The golden JSON from the test's runfiles (the working directory of a
// Bazel test is the workspace's runfiles root).
absl::StatusOr<GoldenFile> LoadGolden(const GoldenSpec& spec) {
  std::string path = spec.golden_path;
  if (!Exists(path)) {
    path = absl::StrCat(Env("TEST_SRCDIR"), "/", Env("TEST_WORKSPACE"), "/",
                        spec.golden_path);
  }
  absl::StatusOr<std::string> json = ReadFile(path);
  if (!json.ok()) return json.status();
  GoldenFile golden;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // the script and the .proto agree
  const auto status =
      google::protobuf::util::JsonStringToMessage(*json, &golden, options);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a golden file: ", status.ToString()));
  }
  return golden;
}

engine::EncodeOptions Options(bool parse_special, bool add_special) {
  engine::EncodeOptions options;
  options.parse_special = parse_special;
  options.add_special = add_special;
  return options;
}

std::string Ids(absl::Span<const int32_t> ids) {
  return absl::StrCat("[", absl::StrJoin(ids, ", "), "]");
}

// Index of the first difference of a and b, or -1 if equal.
int FirstDifference(absl::Span<const int32_t> a, absl::Span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int>(n);
}

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = SelectedSpec();
    ASSERT_NE(spec_, nullptr) << "unknown LOOKAHEAD_GOLDEN_MODEL '"
                              << Env("LOOKAHEAD_GOLDEN_MODEL") << "'";
    const std::string path =
        absl::StrCat(engine::ModelCacheDir(), "/", spec_->model_file);
    if (spec_->opt_in && !Exists(path)) {
      GTEST_SKIP() << spec_->model << " is not in the model cache (" << path
                   << "); tools/setup.sh --model=" << spec_->model
                   << " fetches it";
    }
    ASSERT_TRUE(Exists(path)) << "model not found: " << path
                              << " (run tools/setup.sh --model=" << spec_->model
                              << ", or set LOOKAHEAD_MODEL_DIR)";
    absl::StatusOr<GoldenFile> golden = LoadGolden(*spec_);
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = *std::move(golden);
    absl::StatusOr<std::unique_ptr<engine::GgufFile>> file =
        engine::GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = *std::move(file);
    ASSERT_EQ(file_->file_size(), golden_.generator().model_bytes())
        << path << " is not the file the golden outputs were made from ("
        << golden_.generator().model_sha256()
        << "); rerun tools/setup.sh --model=" << spec_->model;
  }

  const GoldenSpec* spec_ = nullptr;  // never null after SetUp
  GoldenFile golden_;
  std::unique_ptr<engine::GgufFile> file_;
};

// A truncated or hand-edited golden file must not pass by checking nothing.
TEST_F(GoldenTest, FileIsComplete) {
  EXPECT_EQ(golden_.format_version(), 1);
  EXPECT_EQ(golden_.generator().model_file(), spec_->model_file);
  EXPECT_EQ(golden_.probe_ids_size(), kNumProbes);
  EXPECT_GE(golden_.cases_size(), spec_->min_cases);
  EXPECT_GE(golden_.tokenizer_cases_size(), spec_->min_tokenizer_cases);
  EXPECT_EQ(golden_.num_greedy(), spec_->num_greedy);
  int chats = 0;
  int default_system_chats = 0;  // the template inserts its system message
  for (const ModelCase& c : golden_.cases()) {
    SCOPED_TRACE(c.name());
    if (c.kind() == "chat") {
      ++chats;
      ASSERT_FALSE(c.messages().empty());
      default_system_chats += c.messages(0).role() != "system";
    }
    EXPECT_FALSE(c.token_ids().empty());
    EXPECT_EQ(c.greedy_ids_size(), golden_.num_greedy());
    EXPECT_EQ(c.greedy_margins_size(), golden_.num_greedy());
    EXPECT_EQ(c.first_step().probe_logits_size(), kNumProbes);
    ASSERT_EQ(c.top_steps_size(), kTopSteps);
    for (const auto& step : c.top_steps()) {
      EXPECT_EQ(step.ids_size(), golden_.top_k());
      EXPECT_EQ(step.logits_size(), golden_.top_k());
    }
    EXPECT_EQ(c.first_step().argmax(), c.greedy_ids(0));
  }
  EXPECT_GE(chats, spec_->min_chats);
  EXPECT_GE(default_system_chats, 1);
}

TEST_F(GoldenTest, TokenizerMatchesReference) {
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      engine::Tokenizer::FromGguf(*file_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const engine::Tokenizer& tok = **tokenizer;
  engine::TokenizerOptions hf;
  hf.parse_special_in_content = true;
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> hf_tokenizer =
      engine::Tokenizer::FromGguf(*file_, hf);
  ASSERT_TRUE(hf_tokenizer.ok()) << hf_tokenizer.status();
  int checked = 0;
  int chats = 0;
  for (const auto& c : golden_.tokenizer_cases()) {
    const std::vector<int32_t> want(c.token_ids().begin(), c.token_ids().end());
    const std::vector<int32_t> got = tok.Encode(
        c.text(), Options(c.parse_special(), c.add_special_tokens()));
    EXPECT_EQ(got, want) << "tokenizer case " << c.name() << ": text \""
                         << c.text() << "\"\n  ours " << Ids(got) << "\n  HF   "
                         << Ids(want) << "\n  first difference at "
                         << FirstDifference(got, want);
    ++checked;
  }
  for (const ModelCase& c : golden_.cases()) {
    const std::vector<int32_t> want(c.token_ids().begin(), c.token_ids().end());
    const std::vector<int32_t> got = tok.Encode(
        c.prompt(), Options(c.parse_special(), c.add_special_tokens()));
    EXPECT_EQ(got, want) << "prompt " << c.name() << ": \"" << c.prompt()
                         << "\"\n  ours " << Ids(got) << "\n  HF   "
                         << Ids(want) << "\n  first difference at "
                         << FirstDifference(got, want);
    ++checked;
    if (c.kind() != "chat") continue;
    std::vector<engine::ChatMessage> messages;
    for (const auto& m : c.messages()) {
      messages.push_back({m.role(), m.content()});
    }
    absl::StatusOr<std::string> rendered =
        tok.RenderChat(messages, /*add_generation_prompt=*/true);
    ASSERT_TRUE(rendered.ok()) << c.name() << ": " << rendered.status();
    EXPECT_EQ(*rendered, c.prompt()) << "chat template of " << c.name();
    absl::StatusOr<std::vector<int32_t>> chat_ids =
        tok.EncodeChat(messages, /*add_generation_prompt=*/true);
    ASSERT_TRUE(chat_ids.ok()) << c.name() << ": " << chat_ids.status();
    EXPECT_EQ(*chat_ids, want) << "EncodeChat of " << c.name();
    // No golden chat spells a control token in its content, so HF's mode
    // (--parse_special_in_content) gives the same ids.
    chat_ids = (*hf_tokenizer)->EncodeChat(messages, true);
    ASSERT_TRUE(chat_ids.ok()) << c.name() << ": " << chat_ids.status();
    EXPECT_EQ(*chat_ids, want)
        << "EncodeChat (parse_special_in_content) of " << c.name();
    ++chats;
  }
  EXPECT_GE(checked, spec_->min_cases + spec_->min_tokenizer_cases);
  EXPECT_GT(chats, 0);
}

// Float32 logits (vocab) of a (1, vocab) or (vocab) CPU tensor.
std::vector<float> ToVector(const torch::Tensor& logits) {
  torch::Tensor t =
      logits.reshape({-1}).to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(t.data_ptr<float>(),
                            t.data_ptr<float>() + t.numel());
}

// Logits (rows, vocab) of `tokens` as one chain after the cache's committed
// context; the chain stays provisional (`commit`: all of it is committed).
absl::StatusOr<torch::Tensor> ForwardChain(const engine::LlamaModel& model,
                                           engine::KvCache* cache,
                                           std::vector<int32_t> tokens,
                                           bool last_only, bool commit) {
  engine::TreeInput input;
  input.cache = cache;
  input.parents.resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    input.parents[i] = static_cast<int32_t>(i) - 1;
  }
  input.tokens = std::move(tokens);
  input.last_logits_only = last_only;
  absl::StatusOr<std::vector<torch::Tensor>> out =
      model.Forward(absl::MakeConstSpan(&input, 1));
  if (!out.ok()) return out.status();
  if (commit) {
    std::vector<int32_t> path(input.tokens.size());
    for (size_t i = 0; i < path.size(); ++i) path[i] = static_cast<int32_t>(i);
    const absl::Status status = cache->CommitPath(path);
    if (!status.ok()) return status;
  }
  return out->at(0);
}

// Runs one case: prefills HF's prompt ids, compares the first-step logits,
// then decodes greedily one token at a time (the KV-cache decode path),
// comparing the top-5 logits of the first kTopSteps steps. With
// `full_decode` it decodes all num_greedy tokens that way; else, after
// kTopSteps, it feeds HF's remaining greedy tokens as ONE chain (the draft
// verification path: a draft that greedy decoding fully accepts) and checks
// that the argmax of every row is HF's next token. Both prove the greedy
// sequences equal: by induction, each of our argmaxes given HF's (= our)
// prefix is HF's next token. Adds failures for every disagreement; returns
// the largest |ours - HF| over compared logits.
float CheckCase(const engine::LlamaModel& model, const GoldenFile& golden,
                const ModelCase& c, bool full_decode) {
  float max_diff = 0;
  const auto compare = [&](const std::vector<float>& ours, int32_t id,
                           float want, const std::string& what) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, static_cast<int32_t>(ours.size()));
    const float diff = std::fabs(ours[id] - want);
    max_diff = std::max(max_diff, diff);
    EXPECT_LE(diff, kLogitTolerance)
        << c.name() << ": " << what << " logit of id " << id << ": ours "
        << ours[id] << ", HF " << want;
  };
  std::vector<int32_t> ours;
  // Returns false (after adding a failure) iff `logits` do not pick HF's
  // greedy token for `step`.
  const auto check_greedy = [&](const std::vector<float>& logits, int step) {
    const int32_t next = engine::ArgMax(logits);
    ours.push_back(next);
    const int32_t want = c.greedy_ids(step);
    if (next == want) return true;
    ADD_FAILURE() << c.name() << ": greedy token " << step << " is " << next
                  << " (logit " << logits[next] << "), HF chose " << want
                  << " (our logit " << logits[want]
                  << "; HF's top-2 margin there " << c.greedy_margins(step)
                  << ")\n  ours " << Ids(ours) << "\n  HF   "
                  << Ids(c.greedy_ids());
    return false;  // later steps would compare different contexts
  };

  absl::StatusOr<std::unique_ptr<engine::KvCache>> cache = model.NewCache();
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return max_diff;
  const std::vector<int32_t> prompt(c.token_ids().begin(), c.token_ids().end());
  absl::StatusOr<torch::Tensor> prefill = model.Prefill(cache->get(), prompt);
  EXPECT_TRUE(prefill.ok()) << c.name() << ": " << prefill.status();
  if (!prefill.ok()) return max_diff;
  std::vector<float> logits = ToVector(*prefill);
  EXPECT_EQ(logits.size(),
            static_cast<size_t>(golden.generator().vocab_size()));
  for (int i = 0; i < golden.probe_ids_size(); ++i) {
    compare(logits, golden.probe_ids(i), c.first_step().probe_logits(i),
            "first-step probe");
  }
  EXPECT_EQ(engine::ArgMax(logits), c.first_step().argmax())
      << c.name() << ": first-step argmax";

  const int num_greedy = c.greedy_ids_size();
  const int decode_steps =
      full_decode ? num_greedy : std::min(kTopSteps, num_greedy);
  for (int step = 0; step < decode_steps; ++step) {
    if (step < c.top_steps_size()) {
      const auto& top = c.top_steps(step);
      for (int k = 0; k < top.ids_size(); ++k) {
        compare(logits, top.ids(k), top.logits(k),
                absl::StrCat("step ", step, " top-", k + 1));
      }
    }
    if (!check_greedy(logits, step)) return max_diff;
    if (step + 1 == num_greedy) break;
    // The next step's logits: ours[step] committed, its logits returned.
    absl::StatusOr<torch::Tensor> out =
        ForwardChain(model, cache->get(), {ours.back()}, /*last_only=*/true,
                     /*commit=*/true);
    EXPECT_TRUE(out.ok()) << c.name() << " step " << step << ": "
                          << out.status();
    if (!out.ok()) return max_diff;
    logits = ToVector(*out);
  }
  if (decode_steps < num_greedy) {
    // `logits` are for step decode_steps; HF's tokens decode_steps ..
    // num_greedy - 2 give the rows for steps decode_steps + 1 ...
    std::vector<int32_t> chain(c.greedy_ids().begin() + decode_steps,
                               c.greedy_ids().end() - 1);
    if (!check_greedy(logits, decode_steps)) return max_diff;
    absl::StatusOr<torch::Tensor> rows =
        ForwardChain(model, cache->get(), chain, /*last_only=*/false,
                     /*commit=*/false);
    EXPECT_TRUE(rows.ok()) << c.name() << " chain: " << rows.status();
    if (!rows.ok()) return max_diff;
    EXPECT_EQ(rows->size(0), static_cast<int64_t>(chain.size()));
    for (int64_t r = 0; r < rows->size(0); ++r) {
      if (!check_greedy(ToVector((*rows)[r]), decode_steps + 1 + r)) {
        return max_diff;
      }
    }
  }
  EXPECT_EQ(static_cast<int>(ours.size()), num_greedy);
  return max_diff;
}

TEST_F(GoldenTest, ModelMatchesReference) {
  const absl::Status threads = engine::ConfigureThreads({});
  EXPECT_TRUE(threads.ok()) << threads;
  // Native weights by default; LOOKAHEAD_TEST_WEIGHTS=f32 (golden_test_f32)
  // checks the LibTorch path.
  absl::StatusOr<engine::ModelOptions> options = engine::TestDeviceOptions();
  ASSERT_TRUE(options.ok()) << options.status();
  absl::StatusOr<std::unique_ptr<engine::LlamaModel>> model =
      engine::LlamaModel::Load(*file_, *options);
  ASSERT_TRUE(model.ok()) << model.status();
  std::printf("weights: %s\n", (*model)->DescribeWeights().c_str());
  float max_diff = 0;
  int index = 0;
  for (const ModelCase& c : golden_.cases()) {
    const bool full_decode = index++ % kFullDecodeEvery == 0;
    const float diff = CheckCase(**model, golden_, c, full_decode);
    std::printf(
        "golden %-18s %3d prompt tokens  %-6s max |logit - HF| "
        "%.2e\n",
        c.name().c_str(), c.token_ids_size(), full_decode ? "decode" : "chain",
        diff);
    std::fflush(stdout);
    max_diff = std::max(max_diff, diff);
  }
  std::printf("golden: %d cases, max |logit - HF| %.2e (tolerance %.0e)\n",
              golden_.cases_size(), max_diff, kLogitTolerance);
  RecordProperty("max_logit_diff", absl::StrCat(max_diff));
}

}  // namespace
}  // namespace lookahead
