// TfevoIndexedMatmul: out[i] = x[i] @ w[idx[i]] for the active members of a
// population (CPU kernel).
//
//   x   float [n, b, k]   inputs of the n active members (b rows each)
//   w   float [M, k, m]   weight matrices of the whole population
//   idx int32 [n]         member of w used by each row-block of x
//   out float [n, b, m]
//
// Only the selected weight matrices are read, in place: there is no gather
// copy of w.  Out-of-range indices are rejected with InvalidArgument before
// any work starts.  Work runs on TensorFlow's intra-op thread pool:
//
// Units of work are taken from a shared counter by the pool's threads
// (ParallelUnits), so a descheduled thread does not stall the op.
//
// * b <= 4 rows per member (one observation per member and step -- the
//   memory-bound case of a population forward): each member's weight block
//   is streamed once, row by row, into accumulators held in AVX-512
//   registers (a whole 512-column row for b = 1).  Sums run over blocks of
//   kSumBlock rows, added into a per-segment total; the rows are cut into
//   fixed segments of kSegRows, computed as separate units (so even one
//   member uses every thread) and added in segment order.  The split does not
//   depend on the number of threads, so neither do the results.
// * more rows: (member, column block) units, each one Eigen matrix product
//   on row-major maps of the inputs.
//
// The pure-TensorFlow reference is tf.matmul(x, tf.gather(w, idx))
// (tfevo.nn.indexed.indexed_matmul_reference); tests check both agree.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <string>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/blocking_counter.h"
#include "half_convert.h"
#include "mul_add.h"
#include "parallel_units.h"

namespace tfevo {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfevoIndexedMatmul")
    .Input("x: float")
    .Input("w: float")
    .Input("idx: int32")
    .Output("out: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, w, idx;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 3, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &idx));
      DimensionHandle n, k;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 0), c->Dim(idx, 0), &n));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 2), c->Dim(w, 1), &k));
      c->set_output(0, c->MakeShape({n, c->Dim(x, 1), c->Dim(w, 2)}));
      return Status();
    })
    .Doc(R"doc(
Batched matmul with per-row-block weight selection: out[i] = x[i] @ w[idx[i]].

x: [n, b, k] inputs of the active members.
w: [M, k, m] weights of the whole population.
idx: [n] member index (in [0, M)) of each row-block of x.
out: [n, b, m].
)doc");

// Row-blocks with at most this many rows take the streaming (GEMV-like) path.
constexpr int64_t kMaxStreamRows = 4;
// Rows summed per block before adding into the total (bounds rounding growth).
constexpr int64_t kSumBlock = 64;
// Rows per segment (a unit of work) of the streaming path.
constexpr int64_t kSegRows = 1024;

#if defined(__AVX512F__)
// Accumulator vectors of one streaming chunk for NB rows (NB * NV + NB + 1
// registers; a few spills for NB = 1, NV = 32 cost less than a second pass
// over each weight row).
template <int NB>
constexpr int ChunkVectors() {
  return NB == 1 ? 32 : NB == 2 ? 16 : NB == 3 ? 10 : 8;
}

// tot[r, 0 : 16 * NV] += sum over rows [k0, k1) of x[r, kk] * w[kk, 0 : 16 * NV]
// (w already offset to the chunk's first column; the last vector masked by
// `tail` when MASKED), summed in blocks of kSumBlock rows.
// 16 weights from w as float32: loaded (float), or loaded and converted exactly (float16
// bits, uint16_t); the masked form reads only the `tail` lanes.
inline __m512 Load16(const float* w) { return _mm512_loadu_ps(w); }
inline __m512 Load16(const float* w, __mmask16 tail) { return _mm512_maskz_loadu_ps(tail, w); }
#if defined(__AVX512BW__) && defined(__AVX512VL__)
#define TFEVO_STREAM_HALF_AVX512 1
inline __m512 Load16(const uint16_t* w) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
}
inline __m512 Load16(const uint16_t* w, __mmask16 tail) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail, w));
}
#endif

template <int NB, int NV, bool MASKED, typename W>
void StreamChunk(const float* __restrict x, int64_t k, const W* __restrict w, int64_t m, int64_t k0,
                 int64_t k1, __mmask16 tail, float* __restrict tot) {
  for (int64_t kb = k0; kb < k1; kb += kSumBlock) {
    const int64_t ke = std::min(k1, kb + kSumBlock);
    __m512 acc[NB][NV];
#pragma GCC unroll 4
    for (int r = 0; r < NB; ++r)
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int64_t kk = kb; kk < ke; ++kk) {
      const W* __restrict wrow = w + kk * m;
      __m512 xb[NB];
#pragma GCC unroll 4
      for (int r = 0; r < NB; ++r) xb[r] = _mm512_set1_ps(x[r * k + kk]);
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) {
        const __m512 wv = (MASKED && v == NV - 1) ? Load16(wrow + 16 * v, tail) : Load16(wrow + 16 * v);
#pragma GCC unroll 4
        for (int r = 0; r < NB; ++r) acc[r][v] = _mm512_fmadd_ps(xb[r], wv, acc[r][v]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NB; ++r)
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) {
        float* t = tot + r * 16 * NV + 16 * v;
        _mm512_storeu_ps(t, _mm512_add_ps(_mm512_loadu_ps(t), acc[r][v]));
      }
  }
}

// Runs the chunk kernel of NV vectors over columns [c0, c0 + 16 * NV) (or the
// masked remainder `cols` < 16 when MASKED) and writes dst[r, c0 : c0 + width].
template <int NB, int NV, bool MASKED, typename W>
void StreamPiece(const float* x, int64_t k, const W* w, int64_t m, int64_t k0, int64_t k1, int64_t c0,
                 int64_t cols, float* dst, int64_t dst_stride) {
  alignas(64) float tot[NB * 16 * NV];
  std::fill(tot, tot + NB * 16 * NV, 0.0f);
  const __mmask16 tail = MASKED ? static_cast<__mmask16>((1u << cols) - 1u) : static_cast<__mmask16>(0xFFFF);
  StreamChunk<NB, NV, MASKED, W>(x, k, w + c0, m, k0, k1, tail, tot);
  const int64_t width = MASKED ? cols : 16 * NV;
  for (int r = 0; r < NB; ++r) std::copy(tot + r * 16 * NV, tot + r * 16 * NV + width, dst + r * dst_stride + c0);
}

// One streaming unit: rows [k0, k1) of member block w for NB input rows and all
// m columns -- chunks of 16 * ChunkVectors<NB>() columns, then narrower
// pieces (16, 8, 4, 2, 1 vectors, and a masked last vector) for the rest.
template <int NB, typename W>
void StreamUnit(const float* x, int64_t k, const W* w, int64_t m, int64_t k0, int64_t k1, float* dst,
                int64_t dst_stride) {
  constexpr int NV = ChunkVectors<NB>();
  int64_t c0 = 0;
  while (c0 < m) {
    const int64_t left = m - c0;
    if (left >= 16 * NV) {
      StreamPiece<NB, NV, false, W>(x, k, w, m, k0, k1, c0, 0, dst, dst_stride);
      c0 += 16 * NV;
    } else if (NV > 16 && left >= 256) {
      StreamPiece<NB, (NV > 16 ? 16 : 1), false, W>(x, k, w, m, k0, k1, c0, 0, dst, dst_stride);
      c0 += 16 * (NV > 16 ? 16 : 1);
    } else if (NV > 8 && left >= 128) {
      StreamPiece<NB, (NV > 8 ? 8 : 1), false, W>(x, k, w, m, k0, k1, c0, 0, dst, dst_stride);
      c0 += 16 * (NV > 8 ? 8 : 1);
    } else if (left >= 64) {
      StreamPiece<NB, 4, false, W>(x, k, w, m, k0, k1, c0, 0, dst, dst_stride);
      c0 += 64;
    } else if (left >= 32) {
      StreamPiece<NB, 2, false, W>(x, k, w, m, k0, k1, c0, 0, dst, dst_stride);
      c0 += 32;
    } else if (left >= 16) {
      StreamPiece<NB, 1, false, W>(x, k, w, m, k0, k1, c0, 0, dst, dst_stride);
      c0 += 16;
    } else {
      StreamPiece<NB, 1, true, W>(x, k, w, m, k0, k1, c0, left, dst, dst_stride);
      c0 = m;
    }
  }
}

template <typename W>
void StreamRowsAvx512(int64_t nb, const float* x, int64_t k, const W* w, int64_t m, int64_t k0, int64_t k1,
                      float* dst, int64_t dst_stride) {
  switch (nb) {
    case 1: return StreamUnit<1, W>(x, k, w, m, k0, k1, dst, dst_stride);
    case 2: return StreamUnit<2, W>(x, k, w, m, k0, k1, dst, dst_stride);
    case 3: return StreamUnit<3, W>(x, k, w, m, k0, k1, dst, dst_stride);
    default: return StreamUnit<4, W>(x, k, w, m, k0, k1, dst, dst_stride);
  }
}

void StreamRows(int64_t nb, const float* x, int64_t k, const float* w, int64_t m, int64_t k0, int64_t k1,
                float* dst, int64_t dst_stride) {
  StreamRowsAvx512<float>(nb, x, k, w, m, k0, k1, dst, dst_stride);
}
#else
// Portable streaming: the same block/segment structure with L1 accumulators.
void StreamRows(int64_t nb, const float* x, int64_t k, const float* w, int64_t m, int64_t k0, int64_t k1,
                float* dst, int64_t dst_stride) {
  const int64_t scb = std::min<int64_t>(m, 1024);
  std::vector<float> buf(2 * nb * scb);
  float* acc = buf.data();
  float* tot = acc + nb * scb;
  for (int64_t c0 = 0; c0 < m; c0 += scb) {
    const int64_t cw = std::min(scb, m - c0);
    std::fill(tot, tot + nb * cw, 0.0f);
    for (int64_t kb = k0; kb < k1; kb += kSumBlock) {
      const int64_t ke = std::min(k1, kb + kSumBlock);
      std::fill(acc, acc + nb * cw, 0.0f);
      for (int64_t kk = kb; kk < ke; ++kk) {
        const float* wrow = w + kk * m + c0;
        for (int64_t r = 0; r < nb; ++r) {
          const float xv = x[r * k + kk];
          float* ar = acc + r * cw;
          for (int64_t c = 0; c < cw; ++c) ar[c] = tfevo_math::MulAdd(xv, wrow[c], ar[c]);
        }
      }
      for (int64_t c = 0; c < nb * cw; ++c) tot[c] += acc[c];
    }
    for (int64_t r = 0; r < nb; ++r) std::copy(tot + r * cw, tot + (r + 1) * cw, dst + r * dst_stride + c0);
  }
}
#endif

// float16 weights (uint16_t bits), few rows per member: the block/segment structure and
// the summation order of the streaming kernels above (per column: products added in row
// order by fused multiply-adds within a block of kSumBlock rows, block sums added to the
// segment total), with each weight converted to float32 as it is loaded (F16C).  Each
// weight row is read once, front to back, as in the float32 kernels, at half the bytes.
// The result equals the float32 kernels' on weights holding the same values.  (Kept apart
// from the portable float32 loop it mirrors: one template with a per-row helper for both
// measured 10-40% slower here, for float16 and float32 alike.)
void StreamRowsHalf(int64_t nb, const float* x, int64_t k, const uint16_t* w, int64_t m, int64_t k0, int64_t k1,
                    float* dst, int64_t dst_stride) {
  const int64_t scb = std::min<int64_t>(m, 1024);
  std::vector<float> buf(2 * nb * scb);
  float* acc = buf.data();
  float* tot = acc + nb * scb;
  for (int64_t c0 = 0; c0 < m; c0 += scb) {
    const int64_t cw = std::min(scb, m - c0);
    std::fill(tot, tot + nb * cw, 0.0f);
    for (int64_t kb = k0; kb < k1; kb += kSumBlock) {
      const int64_t ke = std::min(k1, kb + kSumBlock);
      std::fill(acc, acc + nb * cw, 0.0f);
      for (int64_t kk = kb; kk < ke; ++kk) {
        const uint16_t* wrow = w + kk * m + c0;
        int64_t c = 0;
#if TFEVO_HALF_F16C && defined(__FMA__)
        __m256 xb[kMaxStreamRows];
        for (int64_t r = 0; r < nb; ++r) xb[r] = _mm256_set1_ps(x[r * k + kk]);
        for (; c + 8 <= cw; c += 8) {
          const __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + c)));
          for (int64_t r = 0; r < nb; ++r) {
            float* a = acc + r * cw + c;
            _mm256_storeu_ps(a, _mm256_fmadd_ps(xb[r], wv, _mm256_loadu_ps(a)));
          }
        }
#endif
        for (; c < cw; ++c) {
          const float wv = tfevo_half::ToFloat(wrow[c]);
          for (int64_t r = 0; r < nb; ++r) acc[r * cw + c] = tfevo_math::MulAdd(x[r * k + kk], wv, acc[r * cw + c]);
        }
      }
      for (int64_t c = 0; c < nb * cw; ++c) tot[c] += acc[c];
    }
    for (int64_t r = 0; r < nb; ++r) std::copy(tot + r * cw, tot + (r + 1) * cw, dst + r * dst_stride + c0);
  }
}

inline void StreamRowsOf(int64_t nb, const float* x, int64_t k, const float* w, int64_t m, int64_t k0, int64_t k1,
                         float* dst, int64_t dst_stride) {
  StreamRows(nb, x, k, w, m, k0, k1, dst, dst_stride);
}
inline void StreamRowsOf(int64_t nb, const float* x, int64_t k, const uint16_t* w, int64_t m, int64_t k0,
                         int64_t k1, float* dst, int64_t dst_stride) {
#if defined(TFEVO_STREAM_HALF_AVX512)
  // The float32 AVX-512 kernel itself, converting each packet of 16 weights as it loads it:
  // same accumulators, same order, same bits as on float32 weights of the same values.
  StreamRowsAvx512<uint16_t>(nb, x, k, w, m, k0, k1, dst, dst_stride);
#else
  StreamRowsHalf(nb, x, k, w, m, k0, k1, dst, dst_stride);
#endif
}

using tfevo_parallel::GrainFor;
using tfevo_parallel::ParallelUnits;


// out[i] = x[i] @ W(idx[i]) where member p's [k, m] block starts at
// wp + p * wstride (row-major, row stride m).  Shared by both ops.  W is float
// or uint16_t (float16 bits, converted to float32 as they are read).
template <typename W>
void IndexedProduct(OpKernelContext* ctx, const float* xp, int64_t n, int64_t b, int64_t k, const W* wp,
                    int64_t wstride, int64_t m, const int32_t* ip, float* op) {
  // Column blocks keep units reasonably sized when n is small and m large.
  const int64_t col_block = m <= 256 ? m : 128;
  const int64_t num_cb = (m + col_block - 1) / col_block;
  const int64_t units = n * num_cb;
  const int64_t cost = std::max<int64_t>(1, 2 * b * k * col_block);

  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  if (b <= kMaxStreamRows) {
    // Few rows per member (one observation per step): the product is
    // memory-bound on reading w[idx[i]].  Stream each weight block once,
    // row by row (Eigen's general product would pack -- copy -- it first).
    // Units are (member, segment of kSegRows rows); with several segments
    // the per-segment sums go to a temporary and are added in order.
    const int64_t nseg = (k + kSegRows - 1) / kSegRows;
    float* part = op;
    Tensor partial;
    if (nseg > 1) {
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({n, nseg, b, m}), &partial));
      part = partial.flat<float>().data();
    }
    auto stream = [&](int64_t u) {
      const int64_t i = u / nseg, sg = u % nseg;
      const int64_t k0 = sg * kSegRows, k1 = std::min(k, k0 + kSegRows);
      const W* wi = wp + static_cast<int64_t>(ip[i]) * wstride;
      float* dst = nseg > 1 ? part + (i * nseg + sg) * b * m : op + i * b * m;
      StreamRowsOf(b, xp + i * b * k, k, wi, m, k0, k1, dst, m);
    };
    ParallelUnits(ctx, n * nseg, GrainFor(2 * b * std::min(k, kSegRows) * m), stream);
    if (nseg > 1) {
      for (int64_t i = 0; i < n; ++i) {
        float* o = op + i * b * m;
        const float* pi = part + i * nseg * b * m;
        std::copy(pi, pi + b * m, o);
        for (int64_t sg = 1; sg < nseg; ++sg) {
          const float* ps = pi + sg * b * m;
          for (int64_t c = 0; c < b * m; ++c) o[c] += ps[c];
        }
      }
    }
    return;
  }
  auto work = [&](int64_t u) {
    const int64_t i = u / num_cb;
    const int64_t c0 = (u % num_cb) * col_block;
    const int64_t cw = std::min(col_block, m - c0);
    Eigen::Map<const RowMat> xi(xp + i * b * k, b, k);
    Eigen::Map<RowMat, 0, Stride> oi(op + i * b * m + c0, b, cw, Stride(m));
    const W* wblock = wp + static_cast<int64_t>(ip[i]) * wstride + c0;
    if constexpr (std::is_same<W, float>::value) {
      Eigen::Map<const RowMat, 0, Stride> wi(wblock, k, cw, Stride(m));
      oi.noalias() = xi * wi;
    } else {  // float16: the unit's [k, cw] block converted to float32 first
      std::vector<float> wf(static_cast<size_t>(k * cw));
      for (int64_t kk = 0; kk < k; ++kk) tfevo_half::ToFloatN(wblock + kk * m, wf.data() + kk * cw, cw);
      Eigen::Map<const RowMat> wi(wf.data(), k, cw);
      oi.noalias() = xi * wi;
    }
  };
  ParallelUnits(ctx, units, GrainFor(cost), work);
}

class IndexedMatmulOp : public OpKernel {
 public:
  explicit IndexedMatmulOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& idx = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() == 3,
                tensorflow::errors::InvalidArgument("TfevoIndexedMatmul: x must be [n, b, k], got ",
                                                    x.shape().DebugString()));
    OP_REQUIRES(ctx, w.dims() == 3,
                tensorflow::errors::InvalidArgument("TfevoIndexedMatmul: w must be [M, k, m], got ",
                                                    w.shape().DebugString()));
    OP_REQUIRES(ctx, idx.dims() == 1,
                tensorflow::errors::InvalidArgument("TfevoIndexedMatmul: idx must be [n], got ",
                                                    idx.shape().DebugString()));
    const int64_t n = x.dim_size(0), b = x.dim_size(1), k = x.dim_size(2);
    const int64_t M = w.dim_size(0), m = w.dim_size(2);
    OP_REQUIRES(ctx, w.dim_size(1) == k,
                tensorflow::errors::InvalidArgument("TfevoIndexedMatmul: x has k=", k, " but w has k=",
                                                    w.dim_size(1)));
    OP_REQUIRES(ctx, idx.dim_size(0) == n,
                tensorflow::errors::InvalidArgument("TfevoIndexedMatmul: x has n=", n,
                                                    " row-blocks but idx has ", idx.dim_size(0),
                                                    " entries"));
    const int32_t* ip = idx.flat<int32_t>().data();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, ip[i] >= 0 && ip[i] < M,
                  tensorflow::errors::InvalidArgument("TfevoIndexedMatmul: idx[", i, "] = ", ip[i],
                                                      " is out of range [0, ", M, ")"));
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, b, m}), &out));
    if (n == 0 || b == 0 || m == 0) return;
    float* op = out->flat<float>().data();
    if (k == 0) {
      std::fill(op, op + n * b * m, 0.0f);
      return;
    }
    IndexedProduct(ctx, x.flat<float>().data(), n, b, k, w.flat<float>().data(), k * m, m, ip, op);
  }
};

// TfevoIndexedDenseFlat: a Dense layer of the active members reading the
// weights in place from the flat population parameters params [M, D]:
// y[i] = act(x[i] @ K(idx[i]) + bias(idx[i])) with member p's kernel
// K(p) = params[p, w_offset : w_offset + k * units] (row-major [k, units]) and
// bias(p) = params[p, bias_offset : bias_offset + units] (none when
// bias_offset < 0); act is none or relu.  Same product as TfevoIndexedMatmul;
// the bias is added to the finished sum, then ReLU (NaN passes through).
// params may be float16 (Tparams = half): the weights are converted to float32
// as they are read (same result as float32 params holding the same values).
template <typename PT>
class IndexedDenseFlatOp : public OpKernel {
 public:
  explicit IndexedDenseFlatOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string activation;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("w_offset", &w_offset_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("units", &units_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bias_offset", &bias_offset_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activation", &activation));
    relu_ = activation == "relu";
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& params = ctx->input(1);
    const Tensor& idx = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() == 3 && params.dims() == 2 && idx.dims() == 1,
                tensorflow::errors::InvalidArgument("TfevoIndexedDenseFlat: expects x [n, b, k], params [M, D], "
                                                    "idx [n]; got ", x.shape().DebugString(), ", ",
                                                    params.shape().DebugString(), ", ", idx.shape().DebugString()));
    const int64_t n = x.dim_size(0), b = x.dim_size(1), k = x.dim_size(2), m = units_;
    const int64_t M = params.dim_size(0), D = params.dim_size(1);
    OP_REQUIRES(ctx, idx.dim_size(0) == n,
                tensorflow::errors::InvalidArgument("TfevoIndexedDenseFlat: x has n=", n, " row-blocks but idx has ",
                                                    idx.dim_size(0), " entries"));
    OP_REQUIRES(ctx, w_offset_ + k * m <= D,
                tensorflow::errors::InvalidArgument("TfevoIndexedDenseFlat: kernel [", w_offset_, ", ",
                                                    w_offset_ + k * m, ") is outside params rows of ", D));
    OP_REQUIRES(ctx, bias_offset_ < 0 || bias_offset_ + m <= D,
                tensorflow::errors::InvalidArgument("TfevoIndexedDenseFlat: bias [", bias_offset_, ", ",
                                                    bias_offset_ + m, ") is outside params rows of ", D));
    const int32_t* ip = idx.flat<int32_t>().data();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, ip[i] >= 0 && ip[i] < M,
                  tensorflow::errors::InvalidArgument("TfevoIndexedDenseFlat: idx[", i, "] = ", ip[i],
                                                      " is out of range [0, ", M, ")"));
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, b, m}), &out));
    if (n == 0 || b == 0 || m == 0) return;
    float* op = out->flat<float>().data();
    // float, or the float16 bits as uint16_t
    using W = typename std::conditional<std::is_same<PT, float>::value, float, uint16_t>::type;
    const W* pp = reinterpret_cast<const W*>(params.flat<PT>().data());
    if (k == 0) {
      std::fill(op, op + n * b * m, 0.0f);
    } else {
      IndexedProduct<W>(ctx, x.flat<float>().data(), n, b, k, pp + w_offset_, D, m, ip, op);
      if (!ctx->status().ok()) return;
    }
    if (bias_offset_ < 0 && !relu_) return;
    std::vector<float> converted(std::is_same<W, float>::value || bias_offset_ < 0 ? 0 : m);  // float16 bias
    for (int64_t i = 0; i < n; ++i) {
      const float* bias = nullptr;
      if (bias_offset_ >= 0) {
        const W* bp = pp + static_cast<int64_t>(ip[i]) * D + bias_offset_;
        if constexpr (std::is_same<W, float>::value) {
          bias = bp;  // read in place, as the weights
        } else {
          tfevo_half::ToFloatN(bp, converted.data(), m);
          bias = converted.data();
        }
      }
      for (int64_t r = 0; r < b; ++r) {
        float* o = op + (i * b + r) * m;
        for (int64_t c = 0; c < m; ++c) {
          float y = bias != nullptr ? o[c] + bias[c] : o[c];
          o[c] = (relu_ && y < 0.0f) ? 0.0f : y;
        }
      }
    }
  }

 private:
  int64_t w_offset_ = 0, units_ = 0, bias_offset_ = -1;
  bool relu_ = false;
};

REGISTER_OP("TfevoIndexedDenseFlat")
    .Input("x: float")
    .Input("params: Tparams")
    .Input("idx: int32")
    .Attr("Tparams: {float, half} = DT_FLOAT")
    .Attr("w_offset: int >= 0")
    .Attr("units: int >= 1")
    .Attr("bias_offset: int = -1")
    .Attr("activation: {'none', 'relu'} = 'none'")
    .Output("y: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, params, idx;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &params));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &idx));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 0), c->Dim(idx, 0), &n));
      int64_t units;
      TF_RETURN_IF_ERROR(c->GetAttr("units", &units));
      c->set_output(0, c->MakeShape({n, c->Dim(x, 1), c->MakeDim(units)}));
      return Status();
    })
    .Doc(R"doc(
Dense layer of the active members with weights read in place from the flat
population parameters: y[i] = act(x[i] @ K(idx[i]) + bias(idx[i])).  The params
may be float16; each weight is then converted to float32 (exactly) as it is read,
so the result is the float32 layer's on the same values, at half the bytes read.
)doc");

REGISTER_KERNEL_BUILDER(Name("TfevoIndexedDenseFlat").Device(DEVICE_CPU).TypeConstraint<float>("Tparams"),
                        IndexedDenseFlatOp<float>);
REGISTER_KERNEL_BUILDER(Name("TfevoIndexedDenseFlat").Device(DEVICE_CPU).TypeConstraint<Eigen::half>("Tparams"),
                        IndexedDenseFlatOp<Eigen::half>);
REGISTER_KERNEL_BUILDER(Name("TfevoIndexedMatmul").Device(DEVICE_CPU), IndexedMatmulOp);

// TfevoToHalf: float32 population parameters rounded to float16 (to nearest, ties
// to even, as tf.cast; beyond +-65504 they become +-inf, NaN stays NaN), plus
// the largest |x| over the finite inputs, in one pass split over TensorFlow's
// pool (F16C).  The float16 params of Policy(weight_dtype="float16") are made
// once per generation from the whole [P, D] population (4 GB of float32 for 256
// Atari nets), where tf.cast converts one value at a time and a separate range
// check would need further passes and temporaries.
REGISTER_OP("TfevoToHalf")
    .Input("x: float")
    .Output("y: half")
    .Output("max_abs_finite: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->Scalar());
      return Status();
    })
    .Doc(R"doc(
y = float16(x) (round to nearest even); max_abs_finite = max |x| over the finite
entries of x (0 when there are none).
)doc");

class ToHalfOp : public OpKernel {
 public:
  explicit ToHalfOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = nullptr;
    Tensor* mx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &mx));
    const int64_t n = x.NumElements();
    const float* xp = x.flat<float>().data();
    uint16_t* yp = reinterpret_cast<uint16_t*>(y->flat<Eigen::half>().data());
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // A population's float16 copy is large (2 GB for 256 Atari nets) and freshly
    // allocated every generation: ask for transparent huge pages, so filling it
    // takes one page fault per 2 MB instead of one per 4 KB (no effect where THP is
    // off; a failure changes nothing).
    if (n * 2 >= (int64_t{1} << 22)) {
      const uintptr_t huge = uintptr_t{1} << 21;
      const uintptr_t b = (reinterpret_cast<uintptr_t>(yp) + huge - 1) & ~(huge - 1);
      const uintptr_t e = (reinterpret_cast<uintptr_t>(yp) + static_cast<uintptr_t>(n) * 2) & ~(huge - 1);
      if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
    }
#endif
    constexpr int64_t kChunk = int64_t{1} << 16;
    const int64_t units = (n + kChunk - 1) / kChunk;
    std::vector<float> part(std::max<int64_t>(units, 1), 0.0f);
    ParallelUnits(ctx, units, 1, [&](int64_t u) {
      const int64_t b = u * kChunk, e = std::min(n, b + kChunk);
      float m = 0.0f;
      int64_t i = b;
#if TFEVO_HALF_F16C && defined(__AVX2__)
      const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
      const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
      __m256 mv = _mm256_setzero_ps();
      for (; i + 8 <= e; i += 8) {
        const __m256 v = _mm256_loadu_ps(xp + i);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(yp + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        const __m256 a = _mm256_and_ps(v, abs_mask);
        mv = _mm256_max_ps(mv, _mm256_and_ps(a, _mm256_cmp_ps(a, inf, _CMP_LT_OQ)));  // NaN, inf -> 0
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, mv);
      for (float l : lanes) m = std::max(m, l);
#endif
      for (; i < e; ++i) {
        const Eigen::half h(xp[i]);
        std::memcpy(yp + i, &h, sizeof(uint16_t));
        const float a = std::fabs(xp[i]);
        if (std::isfinite(a)) m = std::max(m, a);
      }
      part[u] = m;
    });
    float m = 0.0f;
    for (float v : part) m = std::max(m, v);
    mx->scalar<float>()() = m;
  }
};

REGISTER_KERNEL_BUILDER(Name("TfevoToHalf").Device(DEVICE_CPU), ToHalfOp);

}  // namespace tfevo
