// Work sharing over TensorFlow's intra-op thread pool, shared by the population
// kernels (indexed_matmul.cc, pop_conv.cc).
#ifndef TFEVO_CUSTOM_OPS_PARALLEL_UNITS_H_
#define TFEVO_CUSTOM_OPS_PARALLEL_UNITS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/platform/blocking_counter.h"

namespace tfevo_parallel {

// Runs fn(u) for every unit u in [0, units) on TensorFlow's intra-op pool.
// Threads -- the calling one included -- take chunks of `grain` units from a
// shared counter, so a thread that is descheduled (emulator threads, another
// op running at the same time, other processes) does not hold up the op as a
// static split in halves would; a unit computes the same outputs whichever
// thread runs it, so results do not depend on the thread count.
template <typename Fn>
void ParallelUnits(tensorflow::OpKernelContext* ctx, int64_t units, int64_t grain, const Fn& fn) {
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
  grain = std::max<int64_t>(1, grain);
  const int64_t nt = std::min<int64_t>(pool->num_threads, (units + grain - 1) / grain);
  if (nt <= 1) {
    for (int64_t u = 0; u < units; ++u) fn(u);
    return;
  }
  std::atomic<int64_t> next(0);
  auto work = [&]() {
    for (;;) {
      const int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
      if (b >= units) return;
      const int64_t e = std::min(units, b + grain);
      for (int64_t u = b; u < e; ++u) fn(u);
    }
  };
  tensorflow::BlockingCounter helpers(static_cast<int>(nt - 1));
  for (int64_t t = 0; t + 1 < nt; ++t) {
    pool->workers->Schedule([&]() {
      work();
      helpers.DecrementCount();
    });
  }
  work();
  helpers.Wait();
}

// Units per chunk so that a chunk is worth ~2^18 flops (or float copies).
inline int64_t GrainFor(int64_t unit_cost) {
  return std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, unit_cost));
}

}  // namespace tfevo_parallel

#endif  // TFEVO_CUSTOM_OPS_PARALLEL_UNITS_H_
