// Software prefetch of a range of rows, in a form the compiler keeps.
//
// GCC 12 (-O3) treats __builtin_prefetch as free of side effects: a loop of
// them over a genome's rows came out as one prefetch, or as none once the
// loop was inlined into a kernel.  An asm volatile statement is kept as written.
#ifndef TFEVO_CUSTOM_OPS_PREFETCH_H_
#define TFEVO_CUSTOM_OPS_PREFETCH_H_

#include <cstdint>

namespace tfevo_prefetch {

// The cache line holding p, into every cache level (read: T0; write: W).
inline void Line(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, 3);
#endif
}

inline void LineForWrite(const void* p) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__PRFCHW__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  Line(p);
#endif
}

// Every 64-byte line of the floats [p, p + n).
inline void Floats(const float* p, int64_t n) {
  if (n <= 0) return;
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t e = reinterpret_cast<uintptr_t>(p + n);
  for (uintptr_t q = b; q < e; q += 64) Line(reinterpret_cast<const void*>(q));
}

inline void FloatsForWrite(const float* p, int64_t n) {
  if (n <= 0) return;
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t e = reinterpret_cast<uintptr_t>(p + n);
  for (uintptr_t q = b; q < e; q += 64) LineForWrite(reinterpret_cast<const void*>(q));
}

}  // namespace tfevo_prefetch

#endif  // TFEVO_CUSTOM_OPS_PREFETCH_H_
