// Single-thread QuantMatmul on SmolLM2-135M's matmul shapes, Q4_1, Q8_0 and
// F32 weights, against PackedMatmul on F32, and Int8Matmul (int8
// activations, their quantization included; on the same instruction set or
// the best one below it) on Q4_1 and Q8_0; then QuantMatmul on every
// quantized type at 1 and 16 rows (the K types only where k is a multiple
// of 256); then Q4_K and Q6_K, in both forms, on Qwen2.5-1.5B's shapes.
// "rows" prints only Int8Matmul's cost per extra row of x (m = 1..8) on
// Qwen2.5-1.5B's shapes: the cost of each verified draft row.
// Prints ms per call (the median call's thread CPU time) and the
// weight bytes streamed per second; asserts nothing.
//
// Each call reads a different copy of the weight, the copies together over
// 96 MiB (more than the L3), as in a decode pass that streams the whole
// model once.
//
//   bazel run -c opt //kernels/cpu:quant_matmul_bench [-- ISA] [qwen|rows]
// (ISA: scalar, avx2 or avx512; qwen: only the Qwen2.5-1.5B table; rows:
// only the draft-row table)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/quant_matmul.h"

namespace lookahead::kernels {
namespace {

constexpr int64_t kWorkingSet = int64_t{96} << 20;

struct Shape {
  const char* name;
  int64_t k, n;
};

// SmolLM2-135M: hidden 576, 9 query and 3 key/value heads of 64, MLP 1536,
// vocabulary 49152.
constexpr Shape kShapes[] = {
    {"qkv 576->960", 576, 576 + 2 * 192}, {"o 576->576", 576, 576},
    {"gate+up 576->3072", 576, 2 * 1536}, {"down 1536->576", 1536, 576},
    {"lm_head 576->49152", 576, 49152},
};

// Qwen2.5-Coder-1.5B (a Q4_K_M file: Q4_K and Q6_K): hidden 1536, 12
// query and 2 key/value heads of 128, MLP 8960, vocabulary 151936.
constexpr Shape kQwenShapes[] = {
    {"qkv 1536->2048", 1536, 1536 + 2 * 256},
    {"o 1536->1536", 1536, 1536},
    {"gate+up 1536->17920", 1536, 2 * 8960},
    {"down 8960->1536", 8960, 1536},
    {"lm_head 1536->151936", 1536, 151936},
};

struct Result {
  double ms, gbs;
};

// The calling thread's CPU time, in seconds: unlike wall time, not counting
// what other processes on the (shared) cores take.
double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Runs call(copy) over the copies for 0.3 s (at least 5 calls) after one
// untimed round; the median call's thread CPU time.
Result Time(int64_t copies, int64_t bytes,
            const std::function<void(int64_t)>& call) {
  for (int64_t c = 0; c < copies; ++c) call(c);
  std::vector<double> seconds;
  const double start = ThreadSeconds();
  for (int64_t i = 0; i < 5 || ThreadSeconds() - start < 0.3; ++i) {
    const double t0 = ThreadSeconds();
    call(i % copies);
    seconds.push_back(ThreadSeconds() - t0);
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2,
                   seconds.end());
  const double s = seconds[seconds.size() / 2];
  return {1e3 * s, bytes / s * 1e-9};
}

// The quantized types of the second table, and their names.
constexpr QuantType kQuantTypes[] = {
    QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1,
    QuantType::kQ8_0, QuantType::kQ2_K, QuantType::kQ3_K, QuantType::kQ4_K,
    QuantType::kQ5_K, QuantType::kQ6_K,
};

const char* TypeName(QuantType type) {
  switch (type) {
    case QuantType::kF32:
      return "F32";
    case QuantType::kF16:
      return "F16";
    case QuantType::kBF16:
      return "BF16";
    case QuantType::kQ4_0:
      return "Q4_0";
    case QuantType::kQ4_1:
      return "Q4_1";
    case QuantType::kQ5_0:
      return "Q5_0";
    case QuantType::kQ5_1:
      return "Q5_1";
    case QuantType::kQ8_0:
      return "Q8_0";
    case QuantType::kQ2_K:
      return "Q2_K";
    case QuantType::kQ3_K:
      return "Q3_K";
    case QuantType::kQ4_K:
      return "Q4_K";
    case QuantType::kQ5_K:
      return "Q5_K";
    case QuantType::kQ6_K:
      return "Q6_K";
  }
  return "?";
}

// Where a block of `type` keeps its half-precision scales (and mins): up
// to two byte offsets, -1 for none.
struct HalfOffsets {
  int first, second;
};

HalfOffsets ScaleOffsets(QuantType type) {
  switch (type) {
    case QuantType::kQ4_1:
    case QuantType::kQ5_1:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
      return {0, 2};
    case QuantType::kQ2_K:
      return {80, 82};
    case QuantType::kQ3_K:
      return {108, -1};
    case QuantType::kQ6_K:
      return {208, -1};
    default:  // Q4_0, Q5_0, Q8_0
      return {0, -1};
  }
}

// Random bytes; every half-precision scale a modest finite value.
std::vector<uint8_t> RandomWeight(QuantType type, int64_t n, int64_t k,
                                  std::mt19937& rng) {
  std::vector<uint8_t> w(QuantRowBytes(type, k) * n);
  for (size_t i = 0; i < w.size(); i += 4) {
    const uint32_t r = rng();
    std::memcpy(&w[i], &r, std::min<size_t>(4, w.size() - i));
  }
  if (type == QuantType::kF32) {
    std::normal_distribution<float> normal;
    for (size_t i = 0; i < w.size(); i += 4) {
      const float f = normal(rng);
      std::memcpy(&w[i], &f, 4);
    }
    return w;
  }
  const int64_t block = QuantRowBytes(type, QuantBlockSize(type));
  const HalfOffsets at = ScaleOffsets(type);
  for (size_t i = 0; i < w.size(); i += block) {
    const uint16_t h = 0x2000 | (rng() & 0x3FF);  // about 0.01
    std::memcpy(&w[i + at.first], &h, 2);
    if (at.second >= 0) std::memcpy(&w[i + at.second], &h, 2);
  }
  return w;
}

Result BenchQuant(QuantIsa isa, QuantType type, const Shape& s, int64_t m,
                  std::mt19937& rng) {
  const int64_t bytes = QuantRowBytes(type, s.k) * s.n;
  const int64_t copies = std::clamp<int64_t>(kWorkingSet / bytes, 1, 512);
  const std::vector<uint8_t> one = RandomWeight(type, s.n, s.k, rng);
  std::vector<uint8_t> w(bytes * copies);
  for (int64_t c = 0; c < copies; ++c) {
    std::memcpy(&w[c * bytes], one.data(), bytes);
  }
  std::vector<float> x(m * s.k, 0.5f), y(m * s.n);
  return Time(copies, bytes, [&](int64_t c) {
    QuantMatmul(isa, type, x.data(), m, s.k, &w[c * bytes], 0, s.n, y.data(),
                s.n);
  });
}

// Int8Matmul over the weight packed for it, quantizing x in every call.
Result BenchInt8(Int8Isa isa, QuantType type, const Shape& s, int64_t m,
                 std::mt19937& rng) {
  const int64_t bytes = Int8PackedBytes(type, s.k, s.n);
  const int64_t copies = std::clamp<int64_t>(kWorkingSet / bytes, 1, 512);
  const std::vector<uint8_t> one = RandomWeight(type, s.n, s.k, rng);
  std::vector<uint8_t> w(bytes * copies);
  PackInt8Weights(type, one.data(), s.k, s.n, w.data());
  for (int64_t c = 1; c < copies; ++c) {
    std::memcpy(&w[c * bytes], w.data(), bytes);
  }
  std::normal_distribution<float> normal;
  std::vector<float> x(m * s.k), y(m * s.n);
  for (float& f : x) f = normal(rng);
  const Int8Activations form = Int8ActivationsFor(type);
  std::vector<uint8_t> xq(m * Int8RowBytes(form, s.k));
  return Time(copies, bytes, [&](int64_t c) {
    QuantizeInt8Rows(isa, form, x.data(), m, s.k, xq.data());
    Int8Matmul(isa, type, xq.data(), m, s.k, &w[c * bytes], 0, s.n, y.data(),
               s.n);
  });
}

Result BenchPacked(const Shape& s, int64_t m, std::mt19937& rng) {
  const PackedIsa isa = BestPackedIsa();
  const int64_t p = PanelWidth(isa), panels = (s.n + p - 1) / p;
  const int64_t floats = panels * s.k * p, bytes = 4 * floats;
  const int64_t copies = std::clamp<int64_t>(kWorkingSet / bytes, 1, 512);
  std::normal_distribution<float> normal;
  std::vector<float> dense(s.k * s.n);
  for (float& f : dense) f = normal(rng);
  std::vector<float> packed(floats * copies);
  PackWeight(dense.data(), s.k, s.n, p, packed.data());
  for (int64_t c = 1; c < copies; ++c) {
    std::memcpy(&packed[c * floats], packed.data(), bytes);
  }
  std::vector<float> x(m * s.k, 0.5f), y(m * panels * p);
  return Time(copies, bytes, [&](int64_t c) {
    PackedMatmul(isa, x.data(), m, s.k, &packed[c * floats], 0, panels,
                 y.data(), panels * p);
  });
}

const char* IsaName(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return "scalar";
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

void AllTypes(QuantIsa isa, Int8Isa int8_isa);
void QwenTable(QuantIsa isa, Int8Isa int8_isa);
void RowsTable(Int8Isa int8_isa);

int Main(int argc, char** argv) {
  QuantIsa isa = BestQuantIsa();
  // "qwen" (last): only the Qwen2.5-1.5B table.
  const std::string last = argc > 1 ? argv[argc - 1] : "";
  const bool qwen_only = last == "qwen", rows_only = last == "rows";
  if (qwen_only || rows_only) --argc;
  if (argc > 1) {
    const std::string want = argv[1];
    bool found = false;
    for (QuantIsa i : {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512}) {
      if (want == IsaName(i) && BestQuantIsa() >= i) {
        isa = i;
        found = true;
      }
    }
    if (!found) {
      std::fprintf(
          stderr,
          "usage: %s [scalar|avx2|avx512] [qwen|rows] (this CPU: up to "
          "%s)\n",
          argv[0], IsaName(BestQuantIsa()));
      return 2;
    }
  }
  // Int8Matmul on the same instruction set, or the best one below it.
  const Int8Isa int8_isa = std::min(
      BestInt8Isa(), isa == QuantIsa::kScalar ? Int8Isa::kScalar
                     : isa == QuantIsa::kAvx2 ? Int8Isa::kAvx2
                                              : Int8Isa::kAvx512Vnni);
  if (rows_only) {
    RowsTable(int8_isa);
    return 0;
  }
  if (!qwen_only) AllTypes(isa, int8_isa);
  QwenTable(isa, int8_isa);
  return 0;
}

// The SmolLM2 tables.
void AllTypes(QuantIsa isa, Int8Isa int8_isa) {
  const bool packed = BestPackedIsa() != PackedIsa::kNone;
  std::printf(
      "QuantMatmul %s vs PackedMatmul %s and Int8Matmul %s, 1 thread; ms per "
      "call (weight GB/s)\n\n",
      IsaName(isa),
      packed ? (BestPackedIsa() == PackedIsa::kAvx512 ? "avx512" : "avx2")
             : "n/a",
      Int8IsaName(int8_isa));
  std::printf("%-20s %3s | %-16s | %-16s | %-16s | %-16s | %-16s | %-16s\n",
              "shape", "m", "Q4_1", "Q8_0", "F32", "F32 packed", "Q4_1 int8",
              "Q8_0 int8");
  std::mt19937 rng(1);
  for (const Shape& s : kShapes) {
    for (int64_t m : {1, 4, 8, 16, 64}) {
      std::printf("%-20s %3ld", s.name, static_cast<long>(m));
      for (QuantType type :
           {QuantType::kQ4_1, QuantType::kQ8_0, QuantType::kF32}) {
        const Result r = BenchQuant(isa, type, s, m, rng);
        std::printf(" | %7.3f (%5.1f) ", r.ms, r.gbs);
        std::fflush(stdout);
      }
      if (packed) {
        const Result r = BenchPacked(s, m, rng);
        std::printf(" | %7.3f (%5.1f) ", r.ms, r.gbs);
      } else {
        std::printf(" | %16s ", "n/a");
      }
      for (QuantType type : {QuantType::kQ4_1, QuantType::kQ8_0}) {
        const Result r = BenchInt8(int8_isa, type, s, m, rng);
        std::printf(" | %7.3f (%5.1f) ", r.ms, r.gbs);
      }
      std::printf("\n");
    }
  }
  std::printf("\nQuantMatmul %s, every quantized type\n\n%-20s %3s",
              IsaName(isa), "shape", "m");
  for (QuantType type : kQuantTypes) std::printf(" | %-13s", TypeName(type));
  std::printf("\n");
  for (const Shape& s : kShapes) {
    for (int64_t m : {1, 16}) {
      std::printf("%-20s %3ld", s.name, static_cast<long>(m));
      for (QuantType type : kQuantTypes) {
        if (s.k % QuantBlockSize(type) != 0) {
          std::printf(" | %13s", "n/a");
          continue;
        }
        const Result r = BenchQuant(isa, type, s, m, rng);
        std::printf(" | %6.3f (%4.1f)", r.ms, r.gbs);
        std::fflush(stdout);
      }
      std::printf("\n");
    }
  }
}

void QwenTable(QuantIsa isa, Int8Isa int8_isa) {
  std::mt19937 rng(2);
  std::printf("\nQwen2.5-1.5B's shapes: QuantMatmul %s vs Int8Matmul %s\n\n"
              "%-22s %3s | %-16s | %-16s | %-16s | %-16s\n",
              IsaName(isa), Int8IsaName(int8_isa), "shape", "m", "Q4_K",
              "Q6_K", "Q4_K int8", "Q6_K int8");
  for (const Shape& s : kQwenShapes) {
    for (int64_t m : {1, 16, 64}) {
      std::printf("%-22s %3ld", s.name, static_cast<long>(m));
      for (QuantType type : {QuantType::kQ4_K, QuantType::kQ6_K}) {
        const Result r = BenchQuant(isa, type, s, m, rng);
        std::printf(" | %7.3f (%5.1f) ", r.ms, r.gbs);
        std::fflush(stdout);
      }
      for (QuantType type : {QuantType::kQ4_K, QuantType::kQ6_K}) {
        const Result r = BenchInt8(int8_isa, type, s, m, rng);
        std::printf(" | %7.3f (%5.1f) ", r.ms, r.gbs);
        std::fflush(stdout);
      }
      std::printf("\n");
    }
  }
}

// What each further row of x adds to an Int8Matmul call: the cost of one
// more verified draft token, against the one-row call that streams the
// weight.
void RowsTable(Int8Isa int8_isa) {
  std::mt19937 rng(3);
  std::printf(
      "\nQwen2.5-1.5B's shapes, Int8Matmul %s, 1 thread: ms per call at m "
      "rows\n\n%-22s %-5s",
      Int8IsaName(int8_isa), "shape", "type");
  constexpr int64_t kMaxRows = 8;
  for (int64_t m = 1; m <= kMaxRows; ++m) {
    std::printf(" | m=%-5ld", static_cast<long>(m));
  }
  std::printf("\n");
  for (const Shape& s : kQwenShapes) {
    for (QuantType type : {QuantType::kQ4_K, QuantType::kQ6_K}) {
      std::printf("%-22s %-5s", s.name,
                  type == QuantType::kQ4_K ? "Q4_K" : "Q6_K");
      for (int64_t m = 1; m <= kMaxRows; ++m) {
        std::printf(" | %7.3f", BenchInt8(int8_isa, type, s, m, rng).ms);
        std::fflush(stdout);
      }
      std::printf("\n");
    }
  }
}

}  // namespace
}  // namespace lookahead::kernels

int main(int argc, char** argv) { return lookahead::kernels::Main(argc, argv); }
