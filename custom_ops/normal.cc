// TfevoGaussianPopulation: the Gaussian sampler of the ES family in one CPU
// kernel.
//
//   e = scale * N(0, I)                 [n, D]   (Box-Muller on stateless uniforms)
//   x = center + e                      (center given), or e
//   x = [center + e; center - e]        [2n, D]  (mirrored)
//
//   seed    int32 [2]         stateless seed
//   scale   float [] or [D]   multiplies the Box-Muller radius
//   center  float [D] or [0]  (empty: no centre)
//
// The random numbers are exactly those of the pure-TensorFlow reference
// tfevo.strategies.shaping._normal_reference: u = tf.random.stateless_uniform(
// [2, h, D], seed) with h = ceil(n / 2); r = sqrt(-2 log1p(-u[0])) * scale,
// t = 2 pi u[1]; rows [0, h) are r cos t and rows [h, n) are r sin t.  The file
// re-implements TensorFlow's stateless Philox-4x32-10 stream (key derivation
// from the seed, counter layout, uint32 -> float mapping), so the uniforms are
// bit-identical; log1p, sqrt, sin and cos are Eigen's vectorized functions
// (the ones TensorFlow's CPU kernels use), so normals agree to float rounding.
//
// Why a kernel: the reference is ~10 TensorFlow ops, each writing a [h, D] or
// [n, D] temporary, and the stateless uniform kernel itself runs Philox one
// counter at a time.  Here 16 Philox counters run per AVX-512 step, and the
// uniforms, normals and the output are produced chunk by chunk in cache, on
// TensorFlow's intra-op thread pool.  Chunks have fixed boundaries and every
// element goes through the same packet path, so the result does not depend
// on the number of threads.
//
// TfevoStatelessUniform: tf.random.stateless_uniform(shape, seed)
// as float32, or as full-range int32 bits, for a shape given at run time; the
// same Philox stream, bit-identical (tfevo/random_ops.py dispatches to it;
// NEAT's breeding draws its coins and uniforms with it).
//
// Philox core: the same code as custom_ops/qd_emit.cc (each custom op is
// compiled from one self-contained source file by tfevo/ops.py).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "Eigen/Core"
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "philox.h"
#include "var_locks.h"

namespace tfevo_normal {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("TfevoGaussianPopulation")
    .Input("seed: int32")
    .Input("scale: float")
    .Input("center: float")
    .Attr("rows: int >= 1")
    .Attr("dim: int >= 1")
    .Attr("mirrored: bool = false")
    .Output("x: float")
    .SetShapeFn([](InferenceContext* c) {
      int64_t n, d;
      bool mirrored;
      TF_RETURN_IF_ERROR(c->GetAttr("rows", &n));
      TF_RETURN_IF_ERROR(c->GetAttr("dim", &d));
      TF_RETURN_IF_ERROR(c->GetAttr("mirrored", &mirrored));
      c->set_output(0, c->MakeShape({c->MakeDim(mirrored ? 2 * n : n), c->MakeDim(d)}));
      return Status();
    })
    .Doc(R"doc(
Gaussian population from TensorFlow's stateless Philox stream (Box-Muller).

seed: [2] int32 stateless seed.
scale: [] or [dim] multiplier of the normals.
center: [dim] centre added to every row, or [0] for none.
x: [rows, dim] (or [2 rows, dim] mirrored: center + e then center - e).
)doc");

REGISTER_OP("TfevoGaussianFromState")
    .Input("seed: resource")
    .Input("counter: resource")
    .Input("center: resource")
    .Input("sigma: resource")
    .Input("diag: resource")
    .Attr("rows: int >= 1")
    .Attr("dim: int >= 1")
    .Output("x: float")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      int64_t n, d;
      TF_RETURN_IF_ERROR(c->GetAttr("rows", &n));
      TF_RETURN_IF_ERROR(c->GetAttr("dim", &d));
      c->set_output(0, c->MakeShape({c->MakeDim(n), c->MakeDim(d)}));
      return Status();
    })
    .Doc(R"doc(
A separable Gaussian population from a strategy's variables, as one kernel:
counter += 1, then TfevoGaussianPopulation with seed [int32(seed), int32(counter mod (2^31 - 1))]
(tfevo.core.SeedStream.next), center = the center variable and scale = sigma * sqrt(diag).

seed, counter: int64 scalar variables (the counter is incremented).
center, diag: float [dim] variables; sigma: float scalar variable.
x: [rows, dim], bit-identical to the graph of those ops.
)doc");

REGISTER_OP("TfevoStatelessUniform")
    .Input("shape: Tshape")
    .Input("seed: Tseed")
    .Attr("dtype: {float, int32} = DT_FLOAT")
    .Attr("Tshape: {int32, int64} = DT_INT32")
    .Attr("Tseed: {int32, int64} = DT_INT64")
    .Output("output: dtype")
    .SetShapeFn([](InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle seed, out;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &seed));
      TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(0, &out));
      c->set_output(0, out);
      return Status();
    })
    .Doc(R"doc(
tf.random.stateless_uniform(shape, seed) with a run-time shape, bit-identical
to TensorFlow's kernels (default algorithm, Philox-4x32-10):
dtype float: uniform floats in [0, 1);
dtype int32: full-range int32 bits (minval=None, maxval=None, dtype=tf.int32).

shape: 1-D int32/int64 output shape (non-negative).
seed: [2] int32/int64 stateless seed.
)doc");

namespace {

using namespace tfevo_philox;  // NOLINT: Philox stream shared with qd_emit.cc (philox.h)

constexpr int64_t kChunk = 2048;  // uniforms per work unit (a multiple of the packet size)
constexpr int64_t kDrawInlineChunks = 64;  // TfevoStatelessUniform: chunks run inline (see Compute)
constexpr int64_t kInlineChunks = 8;  // up to 8 chunks (16k normals, ~30 us) run on the calling thread

// The body of TfevoGaussianPopulation (and of TfevoGaussianFromState): rows
// [n, d] (2n mirrored) of center + scale * z from the stream of seed (s0, s1);
// scale has d entries (per_dim) or one; center may be null.
void SampleGaussianPopulation(OpKernelContext* ctx, int32_t s0, int32_t s1, int64_t n, int64_t d, bool mirrored,
                              const float* scale, bool per_dim, const float* center, float* out) {
  const bool has_center = center != nullptr;
  const Stream noise = MakeStream(s0, s1);
  const int64_t h = (n + 1) / 2, total = h * d;
  const float two_pi = static_cast<float>(2.0 * M_PI);

  // Writes one row segment: rows `row` (and n + row when mirrored) at columns [j0, j0 + len).
  auto emit = [&](int64_t row, int64_t j0, int64_t len, const float* z) {
    float* o = out + row * d + j0;
    if (!has_center) {
      std::memcpy(o, z, len * sizeof(float));
      if (mirrored) {
        float* m = out + (n + row) * d + j0;
        for (int64_t k = 0; k < len; ++k) m[k] = -z[k];
      }
      return;
    }
    const float* c = center + j0;
    for (int64_t k = 0; k < len; ++k) o[k] = c[k] + z[k];
    if (mirrored) {
      float* m = out + (n + row) * d + j0;
      for (int64_t k = 0; k < len; ++k) m[k] = c[k] - z[k];
    }
  };

  auto work = [&](int64_t begin, int64_t end) {
    using AVec = std::vector<float, Eigen::aligned_allocator<float>>;
    AVec u0(kChunk), u1(kChunk), zc(kChunk), zs(kChunk);
    std::vector<uint32_t> scratch(kChunk + 8);
    for (int64_t c = begin; c < end; ++c) {
      const int64_t s = c * kChunk, len = std::min(kChunk, total - s);
      Uniforms(noise, static_cast<uint64_t>(s), len, u0.data(), scratch.data());
      Uniforms(noise, static_cast<uint64_t>(total + s), len, u1.data(), scratch.data());
      std::fill(u0.begin() + len, u0.end(), 0.5f);  // finite padding: every element takes the packet path
      std::fill(u1.begin() + len, u1.end(), 0.5f);
      using Arr = Eigen::Map<Eigen::ArrayXf, Eigen::AlignedMax>;
      Arr a0(u0.data(), kChunk), a1(u1.data(), kChunk), ac(zc.data(), kChunk), as(zs.data(), kChunk);
      a0 = (-2.0f * (-a0).log1p()).sqrt();  // radius, as the reference: sqrt(-2 * log1p(-u))
      if (per_dim) {                          // r * scale[j], row segment by row segment
        for (int64_t k = 0; k < len;) {
          const int64_t j0 = (s + k) % d, m = std::min(d - j0, len - k);
          float* r = u0.data() + k;
          const float* sc = scale + j0;
          for (int64_t q = 0; q < m; ++q) r[q] *= sc[q];
          k += m;
        }
      } else {
        a0 *= scale[0];
      }
      a1 = two_pi * a1;  // angle
      ac = a0 * a1.cos();
      as = a0 * a1.sin();
      for (int64_t k = 0; k < len;) {
        const int64_t row = (s + k) / d, j0 = (s + k) % d, m = std::min(d - j0, len - k);
        emit(row, j0, m, zc.data() + k);
        if (h + row < n) emit(h + row, j0, m, zs.data() + k);
        k += m;
      }
    }
  };
  const int64_t units = (total + kChunk - 1) / kChunk;
  if (units <= kInlineChunks) {  // small draws: waking pool threads costs more than it saves
    work(0, units);
    return;
  }
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(pool->num_threads, pool->workers, units, 60 * kChunk, work);
}

// TfevoGaussianFromState (see REGISTER_OP): the ask of a diagonal-Gaussian
// strategy as one kernel, so an eager caller runs it on its own thread (a
// function call hands its graph to the inter-op pool).  The variables are
// locked (address order); the counter gets a new buffer, as AssignAddVariableOp
// gives when the old one is shared, so earlier reads never change.
class GaussianFromStateOp : public OpKernel {
 public:
  explicit GaussianFromStateOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rows", &rows_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
  }

  void Compute(OpKernelContext* ctx) override {
    constexpr int kVars = 5;
    const char* names[kVars] = {"seed", "counter", "center", "sigma", "diag"};
    tensorflow::core::RefCountPtr<tensorflow::Var> v[kVars];
    for (int i = 0; i < kVars; ++i)
      OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, i), &v[i]));
    std::vector<tensorflow::Var*> raw;
    for (auto& p : v) raw.push_back(p.get());
    tfevo_vars::VarLocks locks(raw);
    const int64_t d = dim_;
    const tensorflow::DataType want[kVars] = {tensorflow::DT_INT64, tensorflow::DT_INT64, tensorflow::DT_FLOAT,
                                              tensorflow::DT_FLOAT, tensorflow::DT_FLOAT};
    const int64_t len[kVars] = {-1, -1, d, -1, d};
    for (int i = 0; i < kVars; ++i) {
      const Tensor* t = v[i]->tensor();
      const bool shape_ok = len[i] < 0 ? t->dims() == 0 : (t->dims() == 1 && t->dim_size(0) == len[i]);
      OP_REQUIRES(ctx, v[i]->is_initialized && t->dtype() == want[i] && shape_ok,
                  tensorflow::errors::InvalidArgument(
                      "TfevoGaussianFromState: variable ", names[i], " must be an initialised ",
                      tensorflow::DataTypeString(want[i]), len[i] < 0 ? " scalar" : " [dim] vector", " (dim ", d,
                      "), got ", tensorflow::DataTypeString(t->dtype()), " ", t->shape().DebugString()));
    }
    const int64_t count = v[1]->tensor()->scalar<int64_t>()() + 1;
    constexpr int64_t kMod = 2147483647;  // 2^31 - 1, as SeedStream.next
    const int32_t s0 = static_cast<int32_t>(v[0]->tensor()->scalar<int64_t>()());
    const int32_t s1 = static_cast<int32_t>(((count % kMod) + kMod) % kMod);
    const float sigma = v[3]->tensor()->scalar<float>()();
    const float* diag = v[4]->tensor()->flat<float>().data();
    std::vector<float> scale(d);
    for (int64_t j = 0; j < d; ++j) scale[j] = sigma * std::sqrt(diag[j]);
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows_, d}), &out_t));
    Tensor counter_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({}), &counter_t));
    counter_t.scalar<int64_t>()() = count;
    SampleGaussianPopulation(ctx, s0, s1, rows_, d, false, scale.data(), true,
                             v[2]->tensor()->flat<float>().data(), out_t->flat<float>().data());
    *v[1]->tensor() = counter_t;
  }

 private:
  int64_t rows_, dim_;
};

class GaussianPopulationOp : public OpKernel {
 public:
  explicit GaussianPopulationOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rows", &rows_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("mirrored", &mirrored_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& seed_t = ctx->input(0);
    const Tensor& scale_t = ctx->input(1);
    const Tensor& center_t = ctx->input(2);
    const int64_t n = rows_, d = dim_;
    OP_REQUIRES(ctx, seed_t.NumElements() == 2,
                tensorflow::errors::InvalidArgument("TfevoGaussianPopulation: seed must have 2 elements"));
    OP_REQUIRES(ctx, scale_t.NumElements() == 1 || (scale_t.dims() == 1 && scale_t.NumElements() == d),
                tensorflow::errors::InvalidArgument("TfevoGaussianPopulation: scale must be a scalar or [", d,
                                                    "], got ", scale_t.shape().DebugString()));
    const bool has_center = center_t.NumElements() > 0;
    OP_REQUIRES(ctx, !has_center || (center_t.dims() == 1 && center_t.NumElements() == d),
                tensorflow::errors::InvalidArgument("TfevoGaussianPopulation: center must be [", d,
                                                    "] or empty, got ", center_t.shape().DebugString()));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({mirrored_ ? 2 * n : n, d}), &out_t));

    const auto sv = seed_t.flat<int32_t>();
    SampleGaussianPopulation(ctx, sv(0), sv(1), rows_, dim_, mirrored_, scale_t.flat<float>().data(),
                             scale_t.NumElements() != 1, has_center ? center_t.flat<float>().data() : nullptr,
                             out_t->flat<float>().data());
  }

 private:
  int64_t rows_, dim_;
  bool mirrored_;
};

// The key and counter TensorFlow derives from a [2] seed of either integer
// type (GenerateKey: each seed word is converted to uint64; an int32 word is
// sign-extended, so int32 and int64 seeds of equal value give equal streams).
inline Stream MakeStream64(int64_t s0, int64_t s1) {
  const uint64_t a = static_cast<uint64_t>(s0), b = static_cast<uint64_t>(s1);
  uint32_t mix[4];
  Philox(static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), static_cast<uint32_t>(b),
         static_cast<uint32_t>(b >> 32), 0x3ec8f720u, 0x02461e29u, mix);
  return Stream{mix[0], mix[1], mix[2], mix[3]};
}

// PhiloxGroups (philox.h) with more instruction-level parallelism, for the
// long runs of TfevoStatelessUniform: each 64-bit lane carries one group's
// 32-bit word in its low half, so a round is one vpmuludq per product (the
// full 64-bit product: high half by a shift, low half left in place; the
// garbage above bit 31 never reaches a low half, as vpmuludq reads only the
// low 32 bits) and one 3-way xor, with no blends.  Four independent blocks
// of 8 groups hide the multiply latency: 0.34 against 0.49 ns per word on
// one core.  Same words in the same order (checked bit for bit by
// tests/test_philox_draws.py against TensorFlow).
inline void PhiloxGroupsWide(const Stream& s, uint64_t g0, int64_t ng, uint32_t* w) {
  int64_t j = 0;
#if defined(__AVX512F__)
  const __m512i m0 = _mm512_set1_epi64(kM0), m1 = _mm512_set1_epi64(kM1);
  const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  // low halves of (c0, c1) lanes -> c0 c1 interleaved per group; then group pairs of (w0 w1) and (w2 w3)
  const __m512i pk = _mm512_set_epi32(30, 14, 28, 12, 26, 10, 24, 8, 22, 6, 20, 4, 18, 2, 16, 0);
  const __m512i qa = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
  const __m512i qb = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
  for (; j + 32 <= ng && ((g0 + j + 31) >> 32) == (g0 + j) >> 32; j += 32) {
    const uint64_t g = g0 + j;
    const __m512i hi = _mm512_set1_epi64(static_cast<uint32_t>(g >> 32));
    const __m512i c2 = _mm512_set1_epi64(s.c2), c3 = _mm512_set1_epi64(s.c3);
    __m512i a0 = _mm512_add_epi64(_mm512_set1_epi64(static_cast<uint32_t>(g)), lane);
    __m512i b0 = _mm512_add_epi64(a0, _mm512_set1_epi64(8));
    __m512i d0 = _mm512_add_epi64(a0, _mm512_set1_epi64(16));
    __m512i e0 = _mm512_add_epi64(a0, _mm512_set1_epi64(24));
    __m512i a1 = hi, b1 = hi, d1 = hi, e1 = hi;
    __m512i a2 = c2, b2 = c2, d2 = c2, e2 = c2;
    __m512i a3 = c3, b3 = c3, d3 = c3, e3 = c3;
    uint32_t k0 = s.k0, k1 = s.k1;
#define TFEVO_PHILOX_ROUND64(x0, x1, x2, x3)                                   \
  {                                                                          \
    const __m512i p0 = _mm512_mul_epu32(x0, m0), p1 = _mm512_mul_epu32(x2, m1); \
    x0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), x1, kk0, 0x96);  \
    x2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), x3, kk1, 0x96);  \
    x1 = p1;                                                                 \
    x3 = p0;                                                                 \
  }
#pragma GCC unroll 10
    for (int r = 0; r < 10; ++r) {
      const __m512i kk0 = _mm512_set1_epi64(k0), kk1 = _mm512_set1_epi64(k1);
      TFEVO_PHILOX_ROUND64(a0, a1, a2, a3)
      TFEVO_PHILOX_ROUND64(b0, b1, b2, b3)
      TFEVO_PHILOX_ROUND64(d0, d1, d2, d3)
      TFEVO_PHILOX_ROUND64(e0, e1, e2, e3)
      k0 += kW0;
      k1 += kW1;
    }
#undef TFEVO_PHILOX_ROUND64
    auto store = [&](__m512i x0, __m512i x1, __m512i x2, __m512i x3, uint32_t* o) {
      const __m512i x = _mm512_permutex2var_epi32(x0, pk, x1), y = _mm512_permutex2var_epi32(x2, pk, x3);
      _mm512_storeu_si512(o, _mm512_permutex2var_epi64(x, qa, y));
      _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi64(x, qb, y));
    };
    uint32_t* o = w + 4 * j;
    store(a0, a1, a2, a3, o);
    store(b0, b1, b2, b3, o + 32);
    store(d0, d1, d2, d3, o + 64);
    store(e0, e1, e2, e3, o + 96);
  }
#endif
  if (j < ng) PhiloxGroups(s, g0 + j, ng - j, w + 4 * j);
}

// Raw words [start, start + len) of the stream into w; start is a multiple of
// 4 (a Philox group boundary), so whole groups are written in place and only
// a trailing partial group goes through a 4-word buffer.
inline void FillWords(const Stream& s, uint64_t start, int64_t len, uint32_t* w) {
  const int64_t full = len >> 2, rest = len & 3;
  if (full > 0) PhiloxGroupsWide(s, start >> 2, full, w);
  if (rest) {
    uint32_t t[4];
    PhiloxGroups(s, (start >> 2) + full, 1, t);
    std::memcpy(w + 4 * full, t, rest * sizeof(uint32_t));
  }
}

// In-place uint32 -> float of TensorFlow's Uint32ToFloat (exact: the 23 low
// bits become the mantissa of a float in [1, 2), then 1 is subtracted).
inline void WordsToFloats(void* buf, int64_t n) {
  char* p = static_cast<char*>(buf);
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512i mant = _mm512_set1_epi32(0x7fffff), one_bits = _mm512_set1_epi32(0x3f800000);
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(p + 4 * i);
    const __m512i v = _mm512_or_si512(_mm512_and_si512(x, mant), one_bits);
    _mm512_storeu_ps(p + 4 * i, _mm512_sub_ps(_mm512_castsi512_ps(v), one));
  }
#elif defined(__AVX2__)
  const __m256i mant = _mm256_set1_epi32(0x7fffff), one_bits = _mm256_set1_epi32(0x3f800000);
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4 * i));
    const __m256i v = _mm256_or_si256(_mm256_and_si256(x, mant), one_bits);
    _mm256_storeu_ps(reinterpret_cast<float*>(p + 4 * i), _mm256_sub_ps(_mm256_castsi256_ps(v), one));
  }
#endif
  for (; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, p + 4 * i, 4);
    const float f = ToFloat(x);
    std::memcpy(p + 4 * i, &f, 4);
  }
}

// tf.random.stateless_uniform(shape, seed) (float32) and the full-range
// int32 draw, for a shape known only at run time (e.g. computed by another
// kernel).  Element i of the flattened output is word i of the stream
// (Philox group i / 4, word i % 4), as in TensorFlow's FillPhiloxRandom, so
// every element depends on its index only: chunks are independent and the
// result does not depend on the number of threads.
class StatelessUniformOp : public OpKernel {
 public:
  explicit StatelessUniformOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtype", &dtype_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& shape_t = ctx->input(0);
    const Tensor& seed_t = ctx->input(1);
    OP_REQUIRES(ctx, shape_t.dims() == 1,
                tensorflow::errors::InvalidArgument("TfevoStatelessUniform: shape must be a 1-D tensor, got ",
                                                    shape_t.shape().DebugString()));
    OP_REQUIRES(ctx, seed_t.dims() == 1 && seed_t.NumElements() == 2,
                tensorflow::errors::InvalidArgument("TfevoStatelessUniform: seed must have shape [2], got ",
                                                    seed_t.shape().DebugString()));
    TensorShape shape;
    const int64_t rank = shape_t.NumElements();
    for (int64_t k = 0; k < rank; ++k) {
      const int64_t d = shape_t.dtype() == tensorflow::DT_INT32 ? shape_t.flat<int32_t>()(k)
                                                                : shape_t.flat<int64_t>()(k);
      OP_REQUIRES(ctx, d >= 0,
                  tensorflow::errors::InvalidArgument("TfevoStatelessUniform: shape has a negative dimension ",
                                                      d, " at index ", k));
      OP_REQUIRES_OK(ctx, shape.AddDimWithStatus(d));
    }
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out_t));
    const int64_t total = shape.num_elements();
    if (total == 0) return;
    const Stream s = seed_t.dtype() == tensorflow::DT_INT32
                         ? MakeStream64(seed_t.flat<int32_t>()(0), seed_t.flat<int32_t>()(1))
                         : MakeStream64(seed_t.flat<int64_t>()(0), seed_t.flat<int64_t>()(1));
    const bool to_float = dtype_ == tensorflow::DT_FLOAT;
    char* base = static_cast<char*>(const_cast<char*>(out_t->tensor_data().data()));
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t st = c * kChunk, len = std::min(kChunk, total - st);
        uint32_t* w = reinterpret_cast<uint32_t*>(base + 4 * st);
        FillWords(s, static_cast<uint64_t>(st), len, w);
        if (to_float) WordsToFloats(w, len);
      }
    };
    // ~0.5 ns per word on one core (AVX-512): up to 64 chunks (131k words,
    // ~70 us) run on the calling thread, where waking pool threads costs
    // about as much as it saves (and more on a loaded machine).
    const int64_t units = (total + kChunk - 1) / kChunk;
    if (units <= kDrawInlineChunks) {
      work(0, units);
      return;
    }
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(pool->num_threads, pool->workers, units, 2 * kChunk, work);
  }

 private:
  tensorflow::DataType dtype_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfevoStatelessUniform").Device(DEVICE_CPU), StatelessUniformOp);
REGISTER_KERNEL_BUILDER(Name("TfevoGaussianPopulation").Device(DEVICE_CPU), GaussianPopulationOp);
REGISTER_KERNEL_BUILDER(Name("TfevoGaussianFromState").Device(DEVICE_CPU), GaussianFromStateOp);

}  // namespace tfevo_normal
