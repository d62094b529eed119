// TensorFlow's stateless Philox-4x32-10 stream (the one behind
// tf.random.stateless_uniform with the default Philox algorithm), shared by
// the custom ops that must reproduce it bit for bit (normal.cc, qd_emit.cc).
// Header-only; ops.py hashes the headers of this folder into every op's
// build key, so a change here rebuilds the ops that include it.
#ifndef TFEVO_CUSTOM_OPS_PHILOX_H_
#define TFEVO_CUSTOM_OPS_PHILOX_H_

#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace tfevo_philox {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

// Philox-4x32-10 on one counter (TensorFlow's random::PhiloxRandom).
inline void Philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                   uint32_t out[4]) {
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = static_cast<uint32_t>(p1);
    c2 = n2;
    c3 = static_cast<uint32_t>(p0);
    k0 += kW0;
    k1 += kW1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// The key and counter TensorFlow derives from a stateless seed (GenerateKey):
// the seed words (int32 sign-extended to 64 bits) pass once through Philox.
struct Stream {
  uint32_t k0, k1, c2, c3;  // counter words 0 and 1 are the group index
};

inline Stream MakeStream(int32_t s0, int32_t s1) {
  const uint64_t a = static_cast<uint64_t>(static_cast<int64_t>(s0));
  const uint64_t b = static_cast<uint64_t>(static_cast<int64_t>(s1));
  uint32_t mix[4];
  Philox(static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), static_cast<uint32_t>(b),
         static_cast<uint32_t>(b >> 32), 0x3ec8f720u, 0x02461e29u, mix);
  return Stream{mix[0], mix[1], mix[2], mix[3]};
}

// uint32 number i of the stream (element i of stateless_uniform's raw bits).
inline uint32_t Bits(const Stream& s, uint64_t i) {
  uint32_t out[4];
  const uint64_t g = i >> 2;
  Philox(static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32), s.c2, s.c3, s.k0, s.k1, out);
  return out[i & 3];
}

inline float ToFloat(uint32_t x) {  // TensorFlow's Uint32ToFloat: [0, 1)
  const uint32_t v = (x & 0x7fffffu) | 0x3f800000u;
  float f;
  std::memcpy(&f, &v, sizeof f);
  return f - 1.0f;
}

// Philox words of groups [g0, g0 + ng) in TensorFlow's order (4 words per
// group) into w[0 .. 4 * ng).
inline void PhiloxGroups(const Stream& s, uint64_t g0, int64_t ng, uint32_t* w) {
  int64_t j = 0;
#if defined(__AVX512F__)
  // 16 groups per step: the 32x32->64 products of the even and odd lanes are
  // two vpmuludq each; the four output words are interleaved back to the
  // group-major order with two rounds of permutes.
  const __m512i m0 = _mm512_set1_epi64(kM0), m1 = _mm512_set1_epi64(kM1);
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i ilo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i ihi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512i qa = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
  const __m512i qb = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
  for (; j + 16 <= ng && ((g0 + j + 15) >> 32) == (g0 + j) >> 32; j += 16) {
    const uint64_t g = g0 + j;
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(g))), lane);
    __m512i c1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(g >> 32)));
    __m512i c2 = _mm512_set1_epi32(static_cast<int>(s.c2)), c3 = _mm512_set1_epi32(static_cast<int>(s.c3));
    uint32_t k0 = s.k0, k1 = s.k1;
    for (int r = 0; r < 10; ++r) {
      const __m512i e0 = _mm512_mul_epu32(c0, m0), o0 = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
      const __m512i e1 = _mm512_mul_epu32(c2, m1), o1 = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1);
      const __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(e0, 32), o0);
      const __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, e0, _mm512_slli_epi64(o0, 32));
      const __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(e1, 32), o1);
      const __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, e1, _mm512_slli_epi64(o1, 32));
      const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
      const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
      k0 += kW0;
      k1 += kW1;
    }
    // (c0, c1) and (c2, c3) pairs per group, then the pairs of pairs.
    const __m512i a_lo = _mm512_permutex2var_epi32(c0, ilo, c1), a_hi = _mm512_permutex2var_epi32(c0, ihi, c1);
    const __m512i b_lo = _mm512_permutex2var_epi32(c2, ilo, c3), b_hi = _mm512_permutex2var_epi32(c2, ihi, c3);
    uint32_t* o = w + 4 * j;
    _mm512_storeu_si512(o, _mm512_permutex2var_epi64(a_lo, qa, b_lo));
    _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi64(a_lo, qb, b_lo));
    _mm512_storeu_si512(o + 32, _mm512_permutex2var_epi64(a_hi, qa, b_hi));
    _mm512_storeu_si512(o + 48, _mm512_permutex2var_epi64(a_hi, qb, b_hi));
  }
#elif defined(__AVX2__)
  // 16 groups per step as 4 blocks of 4: each 64-bit lane carries one
  // group's 32-bit word in its low half, so a product is one vpmuludq (high
  // half by a shift; the garbage above bit 31 of a lane never reaches a low
  // half, as vpmuludq reads only the low 32 bits); the words are packed back
  // to TensorFlow's group-major order (w0 w1 w2 w3 per group) at the end.
  const __m256i m0 = _mm256_set1_epi64x(kM0), m1 = _mm256_set1_epi64x(kM1);
  const __m256i low = _mm256_set1_epi64x(0xFFFFFFFFll);
  const __m256i lane = _mm256_set_epi64x(3, 2, 1, 0);
  for (; j + 16 <= ng && ((g0 + j + 15) >> 32) == (g0 + j) >> 32; j += 16) {
    const uint64_t g = g0 + j;
    const __m256i hi = _mm256_set1_epi64x(static_cast<int64_t>(g >> 32));
    const __m256i c2 = _mm256_set1_epi64x(s.c2), c3 = _mm256_set1_epi64x(s.c3);
    __m256i x0[4], x1[4], x2[4], x3[4];
    for (int b = 0; b < 4; ++b) {
      x0[b] = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<int64_t>(static_cast<uint32_t>(g) + 4u * b)), lane);
      x1[b] = hi;
      x2[b] = c2;
      x3[b] = c3;
    }
    uint32_t k0 = s.k0, k1 = s.k1;
#pragma GCC unroll 10
    for (int r = 0; r < 10; ++r) {
      const __m256i kk0 = _mm256_set1_epi64x(k0), kk1 = _mm256_set1_epi64x(k1);
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) {
        const __m256i p0 = _mm256_mul_epu32(x0[b], m0), p1 = _mm256_mul_epu32(x2[b], m1);
        x0[b] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), x1[b]), kk0);
        x2[b] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), x3[b]), kk1);
        x1[b] = p1;
        x3[b] = p0;
      }
      k0 += kW0;
      k1 += kW1;
    }
    uint32_t* o = w + 4 * j;
    for (int b = 0; b < 4; ++b) {
      // (w0 | w1 << 32) and (w2 | w3 << 32) per group, then groups in order.
      const __m256i a = _mm256_or_si256(_mm256_and_si256(x0[b], low), _mm256_slli_epi64(x1[b], 32));
      const __m256i c = _mm256_or_si256(_mm256_and_si256(x2[b], low), _mm256_slli_epi64(x3[b], 32));
      const __m256i lo = _mm256_unpacklo_epi64(a, c), hi2 = _mm256_unpackhi_epi64(a, c);  // groups 0,2 | 1,3
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 16 * b), _mm256_permute2x128_si256(lo, hi2, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 16 * b + 8), _mm256_permute2x128_si256(lo, hi2, 0x31));
    }
  }
#endif
  for (; j < ng; ++j) {
    const uint64_t g = g0 + j;
    Philox(static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32), s.c2, s.c3, s.k0, s.k1, w + 4 * j);
  }
}

// Uniform floats for flat indices [start, start + n) of the stream into out;
// scratch holds at least 4 * (((start + n - 1) >> 2) - (start >> 2) + 1) words.
inline void Uniforms(const Stream& s, uint64_t start, int64_t n, float* out, uint32_t* scratch) {
  if (n <= 0) return;
  const uint64_t g0 = start >> 2, g1 = (start + n - 1) >> 2;
  PhiloxGroups(s, g0, static_cast<int64_t>(g1 - g0 + 1), scratch);
  const uint32_t* src = scratch + (start & 3);
  for (int64_t i = 0; i < n; ++i) out[i] = ToFloat(src[i]);
}

}  // namespace tfevo_philox

#endif  // TFEVO_CUSTOM_OPS_PHILOX_H_
