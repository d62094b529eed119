// a * b + c the way every tfevo kernel writes its sums, so that two kernels (or a
// kernel and its vectorized twin) summing the same products in the same order give
// the same bits.
//
// On a target with fused multiply-add (FMA3, and every AVX-512 CPU) it is one
// fused operation, written out: whether a compiler contracts a plain `a * b + c`
// depends on how it vectorizes the loop around it (GCC 12 with AVX-512 left one
// 2-row x 16-column block of the MLP kernel unfused while the Dense kernel fused
// the same sums).  Without FMA it is a multiply and an add, each rounded.
#ifndef TFEVO_CUSTOM_OPS_MUL_ADD_H_
#define TFEVO_CUSTOM_OPS_MUL_ADD_H_

namespace tfevo_math {

inline float MulAdd(float a, float b, float c) {
#if defined(__FMA__)
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

}  // namespace tfevo_math

#endif  // TFEVO_CUSTOM_OPS_MUL_ADD_H_
