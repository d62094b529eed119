// float16 (IEEE binary16) population weights: conversion to float32, shared by
// the in-place population layers (indexed_matmul.cc, pop_conv.cc).
//
// The conversion is exact (every binary16 value is a float32 value), so a layer
// reading float16 weights computes exactly what it computes on float32 weights
// holding the same (rounded) values; only the bytes streamed from memory halve.
#ifndef TFEVO_CUSTOM_OPS_HALF_CONVERT_H_
#define TFEVO_CUSTOM_OPS_HALF_CONVERT_H_

#include <cstdint>
#include <cstring>

#include "Eigen/Core"
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define TFEVO_HALF_F16C 1
#else
#define TFEVO_HALF_F16C 0
#endif

namespace tfevo_half {

inline float ToFloat(uint16_t bits) {
  Eigen::half h;
  std::memcpy(&h, &bits, sizeof(bits));
  return static_cast<float>(h);
}

// dst[i] = float(src[i]) for i < n.
inline void ToFloatN(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if TFEVO_HALF_F16C
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = ToFloat(src[i]);
}

}  // namespace tfevo_half

#endif  // TFEVO_CUSTOM_OPS_HALF_CONVERT_H_
