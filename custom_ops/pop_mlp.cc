// TfevoPopulationMlp: the whole forward pass of a small MLP (Dense -> act ->
// ... -> Dense -> act) for the active members of a population, in ONE kernel
// (CPU).
//
//   x       float [n, b, k0]   inputs of the n active members (b rows each)
//   params  float [M, D]       flat parameters of the whole population
//   idx     int32 [n]          member of params used by each row-block of x
//   y       float [n, b, units[L-1]]
//
// Layer l (l = 0 .. L-1) of member p has kernel
// params[p, w_offsets[l] : w_offsets[l] + k_l * units[l]] (row-major
// [k_l, units[l]], k_0 = x's last dim, k_l = units[l-1]) and bias
// params[p, bias_offsets[l] : + units[l]] (none when bias_offsets[l] < 0); its
// output is act_l(x @ K + bias), act_l one of none, relu, tanh, sigmoid, elu.
// The weights are read in place: no gather copy, no per-layer tensors.
//
// Why a kernel: for a 64x64 MLP the arithmetic per member-step is ~5.6k
// multiply-adds; the pure-TensorFlow path (tfevo.nn.PopulationModel with the
// op disabled, the reference) runs three product ops, bias adds and
// activations, each with its own dispatch and [n, b, 64] temporary, and that
// per-op cost, not the arithmetic, is what a rollout step pays.  Here one
// member's activations stay in a few KB of scratch from input to output.
//
// Arithmetic: each output is sum_j x[j] * K[j, c] accumulated in j order into
// a float32 accumulator starting at 0, then + bias, then the activation
// (tanh: TensorFlow's own rational approximation with the same roundings as
// its Tanh kernel, see TanhAsTensorFlow; sigmoid and elu: Eigen's vectorized
// logistic / exp, the functors TensorFlow's Sigmoid and Elu kernels use, here
// with FMA).  The product sums like the in-place Dense op's streaming path
// (TfevoIndexedDenseFlat for <= 4 rows per member: j-ordered FMA sums in
// blocks of 64 inputs), so relu/linear/tanh MLPs equal the layer-by-layer
// reference built from that op bit for bit; with more rows per member (the
// reference then uses Eigen's GEMM), against TensorFlow's own matmul (custom
// ops off) and for sigmoid/elu they agree to float rounding (tests: rtol
// 1e-5).  A member's result depends
// only on its own inputs and parameters: not on n, on the other members, on
// which row-block it is in, or on the number of threads.
//
// Vector width: the loops are written so that the compiler vectorizes them for
// whatever -march=native offers; on AVX2-only CPUs (no AVX-512) the two parts
// that it did not vectorize -- the tanh (its clamps compiled to branches) and
// the last, narrow column block (an output layer of a few actions) -- are
// written with AVX2 intrinsics, with the same operations per lane.
//
// Threads: only when there is enough work (>= kMinMacsPerShard multiply-adds
// per thread) do the intra-op pool's threads join, taking chunks of members
// from a shared counter; a rollout step of a few hundred small members runs
// inline in the calling thread, with no hand-off to pool threads that the
// simulators' threads keep busy.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TFEVO_MLP_AVX2 1
#endif

#include "Eigen/Core"
#include "mul_add.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/blocking_counter.h"

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

namespace {

enum Act { kNone = 0, kRelu, kTanh, kSigmoid, kElu };

// Work below this many multiply-adds per thread runs inline in the caller.
constexpr int64_t kMinMacsPerShard = int64_t{1} << 21;
// Multiply-adds per chunk of members taken from the shared counter.
constexpr int64_t kGrainMacs = int64_t{1} << 18;
// Output columns per register block.
constexpr int kCols = 64;
// Inputs summed per block before adding into the total.
constexpr int64_t kSumBlock = 64;
// Rows of one member computed together (each weight row loaded once for them).
constexpr int kRowGroup = 4;

bool ParseAct(const std::string& s, Act* a) {
  if (s == "none") *a = kNone;
  else if (s == "relu") *a = kRelu;
  else if (s == "tanh") *a = kTanh;
  else if (s == "sigmoid") *a = kSigmoid;
  else if (s == "elu") *a = kElu;
  else return false;
  return true;
}

// out[c] = sum_j in[j] * w[j * ld + c] for c < CW (CW a compile-time width:
// the accumulators stay in vector registers).
// Sums run over blocks of kSumBlock inputs, each block's sum added to the
// total -- the in-place Dense op's order (TfevoIndexedDenseFlat, one row per
// member), so the two give the same bits.
template <int CW>
inline void ColumnBlock(const float* __restrict in, int64_t k, const float* __restrict w, int64_t ld,
                        float* __restrict out) {
  float tot[CW];
  for (int c = 0; c < CW; ++c) tot[c] = 0.0f;
  for (int64_t kb = 0; kb < k; kb += kSumBlock) {
    const int64_t ke = std::min(k, kb + kSumBlock);
    float acc[CW];
    for (int c = 0; c < CW; ++c) acc[c] = 0.0f;
    for (int64_t j = kb; j < ke; ++j) {
      const float xv = in[j];
      const float* __restrict wr = w + j * ld;
      for (int c = 0; c < CW; ++c) acc[c] = tfevo_math::MulAdd(xv, wr[c], acc[c]);
    }
    for (int c = 0; c < CW; ++c) tot[c] += acc[c];
  }
  for (int c = 0; c < CW; ++c) out[c] = tot[c];
}

// The same for a run-time width cw < kCols (the last, partial column block).
#ifdef TFEVO_MLP_AVX2
// AVX2: columns in packets of 8, the last one masked (loads never touch
// memory past column cw, so the last member's last row is safe); each lane
// runs the scalar code's FMA chain, so the bits are the same.
inline void ColumnTail(const float* __restrict in, int64_t k, const float* __restrict w, int64_t ld, int64_t cw,
                       float* __restrict out) {
  for (int64_t c0 = 0; c0 < cw; c0 += 8) {
    const int64_t lanes = std::min<int64_t>(8, cw - c0);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 tot = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < k; kb += kSumBlock) {
      const int64_t ke = std::min(k, kb + kSumBlock);
      __m256 acc = _mm256_setzero_ps();
      for (int64_t j = kb; j < ke; ++j) {
        acc = _mm256_fmadd_ps(_mm256_set1_ps(in[j]), _mm256_maskload_ps(w + j * ld + c0, mask), acc);
      }
      tot = _mm256_add_ps(tot, acc);
    }
    _mm256_maskstore_ps(out + c0, mask, tot);
  }
}
#else
inline void ColumnTail(const float* __restrict in, int64_t k, const float* __restrict w, int64_t ld, int64_t cw,
                       float* __restrict out) {
  float tot[kCols];
  for (int64_t c = 0; c < cw; ++c) tot[c] = 0.0f;
  for (int64_t kb = 0; kb < k; kb += kSumBlock) {
    const int64_t ke = std::min(k, kb + kSumBlock);
    float acc[kCols];
    for (int64_t c = 0; c < cw; ++c) acc[c] = 0.0f;
    for (int64_t j = kb; j < ke; ++j) {
      const float xv = in[j];
      const float* __restrict wr = w + j * ld;
      for (int64_t c = 0; c < cw; ++c) acc[c] = tfevo_math::MulAdd(xv, wr[c], acc[c]);
    }
    for (int64_t c = 0; c < cw; ++c) tot[c] += acc[c];
  }
  for (int64_t c = 0; c < cw; ++c) out[c] = tot[c];
}
#endif

// out[0:m] = in[0:k] @ W (row-major [k, m]) + bias (bias may be null).
inline void DenseRow(const float* in, int64_t k, const float* w, int64_t m, const float* bias, float* out) {
  int64_t c0 = 0;
  for (; c0 + kCols <= m; c0 += kCols) ColumnBlock<kCols>(in, k, w + c0, m, out + c0);
  const int64_t rest = m - c0;
  if (rest >= 32) {
    ColumnBlock<32>(in, k, w + c0, m, out + c0);
    c0 += 32;
  }
  if (m - c0 >= 16) {
    ColumnBlock<16>(in, k, w + c0, m, out + c0);
    c0 += 16;
  }
  if (m > c0) ColumnTail(in, k, w + c0, m, m - c0, out + c0);
  if (bias != nullptr) {
    for (int64_t c = 0; c < m; ++c) out[c] += bias[c];
  }
}

// tanh bit for bit as TensorFlow's Tanh kernel computes it: Eigen's
// ptanh_float rational approximation (clamp to +-c, odd [9/8] rational in x),
// as the TensorFlow binary runs it -- built without FMA, so every multiply and
// add rounds separately (and the non-FMA clamp constant).  Contraction into
// FMA is switched off for this function only; the compiler still vectorizes
// the loop, which changes nothing per element.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
void TanhAsTensorFlow(float* v, int64_t len) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  constexpr float kClamp = 7.90738964080810547f;
  constexpr float a0 = 1.394553628e-8f, a1 = 2.102733560e-5f, a2 = 3.520756727e-3f, a3 = 1.340216100e-1f;
  constexpr float b0 = 8.015776984e-7f, b1 = 3.326951409e-4f, b2 = 2.597254514e-2f, b3 = 4.673548340e-1f;
  constexpr float b4 = 1.0f;
  int64_t i = 0;
#ifdef TFEVO_MLP_AVX2
  // Eight at a time: the same operations in the same order, each rounded
  // (separate multiplies and adds, no FMA), so every lane equals the scalar
  // loop below.  min(c, x) / max(-c, x) return x when x is NaN, as the
  // scalar clamps do.
  {
    const __m256 c_hi = _mm256_set1_ps(kClamp), c_lo = _mm256_set1_ps(-kClamp);
    const __m256 va0 = _mm256_set1_ps(a0), va1 = _mm256_set1_ps(a1), va2 = _mm256_set1_ps(a2),
                 va3 = _mm256_set1_ps(a3);
    const __m256 vb0 = _mm256_set1_ps(b0), vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2),
                 vb3 = _mm256_set1_ps(b3), vb4 = _mm256_set1_ps(b4);
    for (; i + 8 <= len; i += 8) {
      __m256 x = _mm256_loadu_ps(v + i);
      x = _mm256_min_ps(c_hi, x);
      x = _mm256_max_ps(c_lo, x);
      const __m256 x2 = _mm256_mul_ps(x, x);
      const __m256 x3 = _mm256_mul_ps(x2, x);
      __m256 p = _mm256_add_ps(_mm256_mul_ps(va0, x2), va1);
      p = _mm256_add_ps(_mm256_mul_ps(p, x2), va2);
      p = _mm256_add_ps(_mm256_mul_ps(p, x2), va3);
      __m256 q = _mm256_add_ps(_mm256_mul_ps(vb0, x2), vb1);
      q = _mm256_add_ps(_mm256_mul_ps(q, x2), vb2);
      q = _mm256_add_ps(_mm256_mul_ps(q, x2), vb3);
      q = _mm256_add_ps(_mm256_mul_ps(q, x2), vb4);
      p = _mm256_add_ps(_mm256_mul_ps(x3, p), x);
      _mm256_storeu_ps(v + i, _mm256_div_ps(p, q));
    }
  }
#endif
  for (; i < len; ++i) {
    float x = v[i];
    x = kClamp < x ? kClamp : x;    // std::min(x, c): NaN stays NaN
    x = x < -kClamp ? -kClamp : x;  // std::max(x, -c)
    const float x2 = x * x;
    const float x3 = x2 * x;
    float p = a0 * x2 + a1;
    p = p * x2 + a2;
    p = p * x2 + a3;
    float q = b0 * x2 + b1;
    q = q * x2 + b2;
    q = q * x2 + b3;
    q = q * x2 + b4;
    p = x3 * p + x;
    v[i] = p / q;
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// The same for NB rows at once (each weight row loaded once for all NB input
// rows); every row's sums run exactly as in ColumnBlock, so a row's result
// does not depend on the rows computed with it.
template <int CW, int NB>
inline void ColumnBlockRows(const float* const* in, int64_t k, const float* __restrict w, int64_t ld, int64_t c0,
                            float* const* out) {
  float tot[NB][CW];
  for (int r = 0; r < NB; ++r)
    for (int c = 0; c < CW; ++c) tot[r][c] = 0.0f;
  for (int64_t kb = 0; kb < k; kb += kSumBlock) {
    const int64_t ke = std::min(k, kb + kSumBlock);
    float acc[NB][CW];
    for (int r = 0; r < NB; ++r)
      for (int c = 0; c < CW; ++c) acc[r][c] = 0.0f;
    for (int64_t j = kb; j < ke; ++j) {
      const float* __restrict wr = w + j * ld + c0;
      for (int r = 0; r < NB; ++r) {
        const float xv = in[r][j];
        for (int c = 0; c < CW; ++c) acc[r][c] = tfevo_math::MulAdd(xv, wr[c], acc[r][c]);
      }
    }
    for (int r = 0; r < NB; ++r)
      for (int c = 0; c < CW; ++c) tot[r][c] += acc[r][c];
  }
  for (int r = 0; r < NB; ++r)
    for (int c = 0; c < CW; ++c) out[r][c0 + c] = tot[r][c];
}

// out[r][0:m] = in[r][0:k] @ W + bias for NB rows.
template <int NB>
inline void DenseRows(const float* const* in, int64_t k, const float* w, int64_t m, const float* bias,
                      float* const* out) {
  int64_t c0 = 0;
  for (; c0 + 32 <= m; c0 += 32) ColumnBlockRows<32, NB>(in, k, w, m, c0, out);
  if (m - c0 >= 16) {
    ColumnBlockRows<16, NB>(in, k, w, m, c0, out);
    c0 += 16;
  }
  for (int r = 0; r < NB; ++r) {
    if (m > c0) ColumnTail(in[r], k, w + c0, m, m - c0, out[r] + c0);
    if (bias != nullptr) {
      for (int64_t c = 0; c < m; ++c) out[r][c] += bias[c];
    }
  }
}

inline void Activate(Act act, float* v, int64_t len) {
  Eigen::Map<Eigen::ArrayXf> a(v, len);
  switch (act) {
    case kNone:
      return;
    case kRelu:  // as the in-place Dense op: negative -> 0, NaN passes through
      for (int64_t i = 0; i < len; ++i) v[i] = v[i] < 0.0f ? 0.0f : v[i];
      return;
    case kTanh:
      TanhAsTensorFlow(v, len);
      return;
    case kSigmoid:
      a = a.logistic();
      return;
    case kElu:  // TensorFlow's Elu: x < 0 ? exp(x) - 1 : x
      a = (a < 0.0f).select(a.exp() - 1.0f, a);
      return;
  }
}

}  // namespace

class PopulationMlpOp : public OpKernel {
 public:
  explicit PopulationMlpOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<std::string> acts;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("units", &units_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("w_offsets", &w_offsets_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bias_offsets", &bias_offsets_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activations", &acts));
    const size_t L = units_.size();
    OP_REQUIRES(ctx, L >= 1 && w_offsets_.size() == L && bias_offsets_.size() == L && acts.size() == L,
                tensorflow::errors::InvalidArgument(
                    "TfevoPopulationMlp: units, w_offsets, bias_offsets and activations must have the same "
                    "length >= 1, got ", units_.size(), ", ", w_offsets_.size(), ", ", bias_offsets_.size(), ", ",
                    acts.size()));
    for (size_t l = 0; l < L; ++l) {
      OP_REQUIRES(ctx, units_[l] >= 1,
                  tensorflow::errors::InvalidArgument("TfevoPopulationMlp: units[", l, "] = ", units_[l],
                                                      " must be >= 1"));
      OP_REQUIRES(ctx, w_offsets_[l] >= 0,
                  tensorflow::errors::InvalidArgument("TfevoPopulationMlp: w_offsets[", l, "] = ", w_offsets_[l],
                                                      " must be >= 0"));
      Act a;
      OP_REQUIRES(ctx, ParseAct(acts[l], &a),
                  tensorflow::errors::InvalidArgument("TfevoPopulationMlp: activations[", l, "] = '", acts[l],
                                                      "' is not one of none, relu, tanh, sigmoid, elu"));
      acts_.push_back(a);
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& params = ctx->input(1);
    const Tensor& idx = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() == 3 && params.dims() == 2 && idx.dims() == 1,
                tensorflow::errors::InvalidArgument("TfevoPopulationMlp: expects x [n, b, k], params [M, D], "
                                                    "idx [n]; got ", x.shape().DebugString(), ", ",
                                                    params.shape().DebugString(), ", ", idx.shape().DebugString()));
    const int64_t n = x.dim_size(0), b = x.dim_size(1), k0 = x.dim_size(2);
    const int64_t M = params.dim_size(0), D = params.dim_size(1);
    const int64_t L = static_cast<int64_t>(units_.size());
    OP_REQUIRES(ctx, idx.dim_size(0) == n,
                tensorflow::errors::InvalidArgument("TfevoPopulationMlp: x has n=", n, " row-blocks but idx has ",
                                                    idx.dim_size(0), " entries"));
    int64_t k = k0, width = k0, macs = 0;
    for (int64_t l = 0; l < L; ++l) {
      const int64_t m = units_[l];
      OP_REQUIRES(ctx, w_offsets_[l] + k * m <= D,
                  tensorflow::errors::InvalidArgument("TfevoPopulationMlp: layer ", l, " kernel [", w_offsets_[l],
                                                      ", ", w_offsets_[l] + k * m, ") is outside params rows of ",
                                                      D));
      OP_REQUIRES(ctx, bias_offsets_[l] < 0 || bias_offsets_[l] + m <= D,
                  tensorflow::errors::InvalidArgument("TfevoPopulationMlp: layer ", l, " bias [", bias_offsets_[l],
                                                      ", ", bias_offsets_[l] + m, ") is outside params rows of ",
                                                      D));
      macs += k * m;
      width = std::max(width, m);
      k = m;
    }
    const int64_t m_out = units_[L - 1];
    const int32_t* ip = idx.flat<int32_t>().data();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, ip[i] >= 0 && ip[i] < M,
                  tensorflow::errors::InvalidArgument("TfevoPopulationMlp: idx[", i, "] = ", ip[i],
                                                      " is out of range [0, ", M, ")"));
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, b, m_out}), &out));
    if (n == 0 || b == 0) return;
    const float* xp = x.flat<float>().data();
    const float* pp = params.flat<float>().data();
    float* yp = out->flat<float>().data();

    // Members [lo, hi): two ping-pong scratch rows of the widest layer, both
    // 64-byte aligned, so Eigen's vectorized activations split every row into
    // packets and a scalar tail the same way whatever the output address
    // (results must not depend on where a member's row lands).
    // Rows of one member go through the layers in groups of up to kRowGroup.
    const int64_t stride = (width + 15) / 16 * 16;
    auto work = [&](int64_t lo, int64_t hi) {
      std::vector<float> scratch(2 * kRowGroup * stride + 16);
      float* base = scratch.data();
      base += (16 - (reinterpret_cast<uintptr_t>(base) / sizeof(float)) % 16) % 16;
      float* buf[2] = {base, base + kRowGroup * stride};
      for (int64_t i = lo; i < hi; ++i) {
        const float* prow = pp + static_cast<int64_t>(ip[i]) * D;
        for (int64_t r0 = 0; r0 < b; r0 += kRowGroup) {
          const int nb = static_cast<int>(std::min<int64_t>(kRowGroup, b - r0));
          const float* in[kRowGroup];
          float* dst[kRowGroup];
          for (int r = 0; r < nb; ++r) in[r] = xp + (i * b + r0 + r) * k0;
          int64_t kin = k0;
          for (int64_t l = 0; l < L; ++l) {
            const int64_t m = units_[l];
            const float* w = prow + w_offsets_[l];
            const float* bias = bias_offsets_[l] >= 0 ? prow + bias_offsets_[l] : nullptr;
            for (int r = 0; r < nb; ++r) dst[r] = buf[l & 1] + r * stride;
            switch (nb) {
              case 1: DenseRow(in[0], kin, w, m, bias, dst[0]); break;
              case 2: DenseRows<2>(in, kin, w, m, bias, dst); break;
              case 3: DenseRows<3>(in, kin, w, m, bias, dst); break;
              default: DenseRows<4>(in, kin, w, m, bias, dst); break;
            }
            for (int r = 0; r < nb; ++r) {
              Activate(acts_[l], dst[r], m);
              in[r] = dst[r];
            }
            kin = m;
          }
          for (int r = 0; r < nb; ++r) std::copy(in[r], in[r] + m_out, yp + (i * b + r0 + r) * m_out);
        }
      }
    };
    const int64_t per_member = std::max<int64_t>(1, macs * b);
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    const int64_t nt = std::min<int64_t>({n, static_cast<int64_t>(pool->num_threads),
                                          std::max<int64_t>(1, n * per_member / kMinMacsPerShard)});
    if (nt <= 1) {
      work(0, n);
      return;
    }
    // Threads -- the calling one included -- take chunks of members from a
    // shared counter, so a pool thread that the OS deschedules (simulator
    // threads, other processes) does not hold up the op as a static split
    // would; a member's arithmetic is the same whichever thread runs it.
    const int64_t grain = std::max<int64_t>(1, kGrainMacs / per_member);
    std::atomic<int64_t> next(0);
    auto take = [&]() {
      for (;;) {
        const int64_t lo = next.fetch_add(grain, std::memory_order_relaxed);
        if (lo >= n) return;
        work(lo, std::min(n, lo + grain));
      }
    };
    tensorflow::BlockingCounter helpers(static_cast<int>(nt - 1));
    for (int64_t t = 0; t + 1 < nt; ++t) {
      pool->workers->Schedule([&]() {
        take();
        helpers.DecrementCount();
      });
    }
    take();
    helpers.Wait();
  }

 private:
  std::vector<int64_t> units_, w_offsets_, bias_offsets_;
  std::vector<Act> acts_;
};

REGISTER_OP("TfevoPopulationMlp")
    .Input("x: float")
    .Input("params: float")
    .Input("idx: int32")
    .Attr("units: list(int)")
    .Attr("w_offsets: list(int)")
    .Attr("bias_offsets: list(int)")
    .Attr("activations: list(string)")
    .Output("y: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, params, idx;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &params));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &idx));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 0), c->Dim(idx, 0), &n));
      std::vector<int64_t> units;
      TF_RETURN_IF_ERROR(c->GetAttr("units", &units));
      if (units.empty()) return tensorflow::errors::InvalidArgument("TfevoPopulationMlp: units must not be empty");
      c->set_output(0, c->MakeShape({n, c->Dim(x, 1), c->MakeDim(units.back())}));
      return Status();
    })
    .Doc(R"doc(
Forward pass of a small MLP for the active members of a population, reading
each member's weights in place from the flat parameters:
y[i] = act_{L-1}(... act_0(x[i] @ K_0(idx[i]) + b_0(idx[i])) ... ).
)doc");

REGISTER_KERNEL_BUILDER(Name("TfevoPopulationMlp").Device(DEVICE_CPU), PopulationMlpOp);

}  // namespace tfevo
