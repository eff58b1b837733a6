// Counter-based random numbers shared by the CPU sampler (engine/model/sampler)
// and the CUDA token selection kernel (kernels/cuda/select_tokens.cu): one
// definition, so a draw on the GPU and on the CPU is the same function of
// (seed, position, token). Pure functions; thread-safe.
//
// DO NOT CHANGE the constants: seeded outputs of every deployed verifier
// depend on them (a request replayed with the same seed must give the same
// tokens).
#ifndef LOOKAHEAD_KERNELS_COUNTER_RNG_H_
#define LOOKAHEAD_KERNELS_COUNTER_RNG_H_

#include <cstdint>

#if defined(__CUDACC__)
#define LOOKAHEAD_HOST_DEVICE __host__ __device__
#else
#define LOOKAHEAD_HOST_DEVICE
#endif

namespace lookahead::kernels {

LOOKAHEAD_HOST_DEVICE inline uint64_t SplitMix64Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The whitened key of `seed`: nearby seeds give unrelated streams.
LOOKAHEAD_HOST_DEVICE inline uint64_t CounterKey(uint64_t seed) {
  return SplitMix64Finalize(seed + 0x9e3779b97f4a7c15ULL);
}

// 64 random bits of (key, counter): the key combined with the counter's
// golden-ratio step.
LOOKAHEAD_HOST_DEVICE inline uint64_t KeyedRandom(uint64_t key,
                                                  uint64_t counter) {
  return SplitMix64Finalize(
      key ^ (counter * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
}

// Returns 64 random bits that depend only on (seed, counter).
LOOKAHEAD_HOST_DEVICE inline uint64_t CounterRandom(uint64_t seed,
                                                    uint64_t counter) {
  return KeyedRandom(CounterKey(seed), counter);
}

// The key of every draw at `position`: CounterUniform(seed, position, t) ==
// KeyedUniform(PositionKey(seed, position), t). A sampler scanning the
// vocabulary computes it once, not once per token.
LOOKAHEAD_HOST_DEVICE inline uint64_t PositionKey(uint64_t seed,
                                                  int64_t position) {
  return CounterKey(CounterRandom(seed, static_cast<uint64_t>(position)));
}

// A uniform double in (0, 1) from a PositionKey and a token:
// (53 random bits + 0.5) / 2^53, so never 0 or 1.
LOOKAHEAD_HOST_DEVICE inline double KeyedUniform(uint64_t position_key,
                                                 int32_t token) {
  const uint64_t bits = KeyedRandom(
      position_key, static_cast<uint64_t>(static_cast<uint32_t>(token)));
  // bits >> 11 < 2^53: the signed conversion is exact and one instruction.
  return (static_cast<double>(static_cast<int64_t>(bits >> 11)) + 0.5) *
         0x1.0p-53;
}

// Returns a uniform double in (0, 1) keyed by (seed, position, token).
LOOKAHEAD_HOST_DEVICE inline double CounterUniform(uint64_t seed,
                                                   int64_t position,
                                                   int32_t token) {
  return KeyedUniform(PositionKey(seed, position), token);
}

}  // namespace lookahead::kernels

#endif  // LOOKAHEAD_KERNELS_COUNTER_RNG_H_
