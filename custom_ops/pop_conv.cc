// TfevoPopulationConv2D: a 2-D convolution (channels last) of every active
// member of a population with its own kernel, plus optional bias and ReLU, as
// one CPU kernel.
//
//   x      float [n, B, H, W, C]     inputs of the n active members
//   kernel float [M, kh, kw, C, F]   kernels of the whole population
//   bias   float [M, F]              (ignored when use_bias is false)
//   idx    int32 [n]                 member of kernel/bias used by row-block i
//   y      float [n, B, Ho, Wo, F]   y[i, b] = act(conv(x[i, b], kernel[idx[i]]) + bias[idx[i]])
//
// strides [sh, sw], padding SAME or VALID with TensorFlow's rules (SAME pads
// max((Ho - 1) * s + k - H, 0) zeros, the smaller half before).
//
// TfevoPopulationConv2DFlat is the same kernel reading each member's kernel
// and bias in place from the flat population parameters params [M, D] (at
// column offsets given as attributes), so a rollout needs no per-layer copy of
// the population at all.  Its params may be float16 (Tparams = half): the
// active members' kernels and biases are then converted to float32 (exactly)
// first, and the convolution is the float32 one on those values.
//
// The pure-TensorFlow reference is the im2col path of
// tfevo.nn.layers.population_conv2d (tf.image.extract_patches, then a batched
// matmul against the gathered kernels, bias add, activation).  This kernel
// computes the same sums without materializing the patches and without
// copying the selected kernels: each output pixel is the sum over (ky, kx, c)
// -- im2col's column order -- of input * weight, accumulated with fused
// multiply-adds in that order, then + bias, then ReLU.  Padded positions are
// zeros that are multiplied like real inputs (as im2col does), so an inf or
// NaN weight gives NaN exactly where the reference does.
//
// Work: (image, output row) units on TensorFlow's intra-op pool, taken by
// the threads from a shared counter (ParallelUnits).  Each unit
// computes whole output rows in register tiles of R pixels x NV vectors of 16
// channels (AVX-512; one broadcast input value times one weight vector per
// FMA, the weights of a member stay in L1/L2 across the tiles).  Every output
// element is computed by exactly one unit in a fixed order, so results do not
// depend on the number of threads.  With AVX2 + FMA only (no AVX-512) the
// same tiles run on 8-float vectors (6 pixels x 16 channels); without either a
// portable loop with the same order is used.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/blocking_counter.h"
#include "half_convert.h"
#include "mul_add.h"
#include "parallel_units.h"

namespace tfevo_pop_conv {

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

inline int64_t OutSize(int64_t size, int64_t k, int64_t s, bool same) {
  return same ? (size + s - 1) / s : (size - k) / s + 1;
}

REGISTER_OP("TfevoPopulationConv2D")
    .Input("x: float")
    .Input("kernel: float")
    .Input("bias: float")
    .Input("idx: int32")
    .Attr("strides: list(int)")
    .Attr("padding: {'SAME', 'VALID'}")
    .Attr("activation: {'none', 'relu'} = 'none'")
    .Attr("use_bias: bool = true")
    .Output("y: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, k, idx;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 5, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 5, &k));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &idx));
      DimensionHandle n, ch;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 0), c->Dim(idx, 0), &n));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 4), c->Dim(k, 3), &ch));
      std::vector<int32_t> strides;
      std::string padding;
      TF_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
      TF_RETURN_IF_ERROR(c->GetAttr("padding", &padding));
      if (strides.size() != 2 || strides[0] < 1 || strides[1] < 1) {
        return ::tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: strides must be 2 positive ints");
      }
      const bool same = padding == "SAME";
      DimensionHandle ho = c->UnknownDim(), wo = c->UnknownDim();
      if (c->ValueKnown(c->Dim(x, 2)) && c->ValueKnown(c->Dim(k, 1))) {
        ho = c->MakeDim(OutSize(c->Value(c->Dim(x, 2)), c->Value(c->Dim(k, 1)), strides[0], same));
      }
      if (c->ValueKnown(c->Dim(x, 3)) && c->ValueKnown(c->Dim(k, 2))) {
        wo = c->MakeDim(OutSize(c->Value(c->Dim(x, 3)), c->Value(c->Dim(k, 2)), strides[1], same));
      }
      c->set_output(0, c->MakeShape({n, c->Dim(x, 1), ho, wo, c->Dim(k, 4)}));
      return Status();
    })
    .Doc(R"doc(
Per-member 2-D convolution of the active members of a population (channels last).

x: [n, B, H, W, C] inputs of the active members.
kernel: [M, kh, kw, C, F] kernels of the whole population.
bias: [M, F] biases (ignored unless use_bias).
idx: [n] member index (in [0, M)) of each row-block of x.
y: [n, B, Ho, Wo, F] = activation(conv2d(x[i], kernel[idx[i]]) + bias[idx[i]]).
)doc");

REGISTER_OP("TfevoPopulationConv2DFlat")
    .Input("x: T")
    .Input("params: Tparams")
    .Input("idx: int32")
    .Attr("T: {float, uint8} = DT_FLOAT")
    .Attr("Tparams: {float, half} = DT_FLOAT")
    .Attr("input_scale: float = 1.0")
    .Attr("kernel_offset: int >= 0")
    .Attr("kernel_size: list(int)")
    .Attr("filters: int >= 1")
    .Attr("bias_offset: int = -1")
    .Attr("strides: list(int)")
    .Attr("padding: {'SAME', 'VALID'}")
    .Attr("activation: {'none', 'relu'} = 'none'")
    .Output("y: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, params, idx;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 5, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &params));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &idx));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 0), c->Dim(idx, 0), &n));
      std::vector<int32_t> strides, ksize;
      std::string padding;
      int64_t filters;
      TF_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
      TF_RETURN_IF_ERROR(c->GetAttr("kernel_size", &ksize));
      TF_RETURN_IF_ERROR(c->GetAttr("padding", &padding));
      TF_RETURN_IF_ERROR(c->GetAttr("filters", &filters));
      if (strides.size() != 2 || strides[0] < 1 || strides[1] < 1 || ksize.size() != 2 || ksize[0] < 1 ||
          ksize[1] < 1) {
        return ::tensorflow::errors::InvalidArgument(
            "TfevoPopulationConv2DFlat: strides and kernel_size must be 2 positive ints");
      }
      const bool same = padding == "SAME";
      DimensionHandle ho = c->UnknownDim(), wo = c->UnknownDim();
      if (c->ValueKnown(c->Dim(x, 2))) ho = c->MakeDim(OutSize(c->Value(c->Dim(x, 2)), ksize[0], strides[0], same));
      if (c->ValueKnown(c->Dim(x, 3))) wo = c->MakeDim(OutSize(c->Value(c->Dim(x, 3)), ksize[1], strides[1], same));
      c->set_output(0, c->MakeShape({n, c->Dim(x, 1), ho, wo, c->MakeDim(filters)}));
      return Status();
    })
    .Doc(R"doc(
TfevoPopulationConv2D reading the kernels and biases in place from the flat
population parameters: member p's kernel [kh, kw, C, filters] is
params[p, kernel_offset : kernel_offset + kh*kw*C*filters] (row-major), its
bias params[p, bias_offset : bias_offset + filters] (none when bias_offset < 0).
The input is float32, or uint8 (e.g. Atari frames); it is used as
float(x) * input_scale, computed once while the zero-padded copy is made --
exactly what tf.cast(x, tf.float32) * input_scale gives.  The params may be
float16; the weights are then converted to float32 (exactly) and used as such.
)doc");

// One output row segment: pixels ox0 .. ox0 + R - 1 of one output row, channels
// f0 .. f0 + 16 * NV - 1 (the last vector masked by `tail`).
struct Tile {
  const float* in;       // padded input at (oy * sh, ox0 * sw, 0)
  int64_t pix_stride;    // floats between consecutive output pixels' inputs (sw * C)
  int64_t row_stride;    // floats between padded input rows (Wp * C)
  int64_t kh, kwc;       // kernel rows; floats per kernel row of input (kw * C)
  const float* w;        // kernel[member] + f0, rows of F floats in (ky, kx, c) order
  int64_t F;             // row stride of w and pixel stride of out
  const float* bias;     // bias[member] + f0 or nullptr
  bool relu;
  float* out;            // y at (oy, ox0, f0)
};

#if defined(__AVX512F__)
template <int NV, int R>
inline void TileKernel(const Tile& t, __mmask16 tail) {
  __m512 acc[R][NV];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t ky = 0; ky < t.kh; ++ky) {
    const float* __restrict xrow = t.in + ky * t.row_stride;
    const float* __restrict wrow = t.w + ky * t.kwc * t.F;
    for (int64_t j = 0; j < t.kwc; ++j) {
      __m512 wv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        wv[v] = v + 1 < NV ? _mm512_loadu_ps(wrow + j * t.F + 16 * v)
                           : _mm512_maskz_loadu_ps(tail, wrow + j * t.F + 16 * v);
      }
#pragma GCC unroll 32
      for (int r = 0; r < R; ++r) {
        const __m512 xb = _mm512_set1_ps(xrow[r * t.pix_stride + j]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(xb, wv[v], acc[r][v]);
      }
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const __mmask16 m = v + 1 < NV ? static_cast<__mmask16>(0xFFFF) : tail;
    const __m512 b = t.bias != nullptr ? _mm512_maskz_loadu_ps(m, t.bias + 16 * v) : zero;
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      __m512 y = t.bias != nullptr ? _mm512_add_ps(acc[r][v], b) : acc[r][v];
      // max(0, y) returns y when y is NaN (the second operand), as tf.nn.relu does.
      if (t.relu) y = _mm512_max_ps(zero, y);
      _mm512_mask_storeu_ps(t.out + r * t.F + 16 * v, m, y);
    }
  }
}

// Pixels per tile for NV vectors: R * NV accumulators + NV weights + 1 broadcast <= 32 registers.
template <int NV>
constexpr int MaxPixels() {
  return NV == 1 ? 12 : NV == 2 ? 12 : NV == 3 ? 8 : 6;
}

template <int NV, int R>
inline void TileDispatchR(const Tile& t, int r, __mmask16 tail) {
  if constexpr (R >= 1) {
    if (r == R) return TileKernel<NV, R>(t, tail);
    TileDispatchR<NV, R - 1>(t, r, tail);
  }
}

// A row segment of `pixels` output pixels with NV channel vectors.
template <int NV>
void RowSegment(Tile t, int64_t pixels, __mmask16 tail) {
  constexpr int RM = MaxPixels<NV>();
  int64_t p = 0;
  for (; p + RM <= pixels; p += RM) {
    TileKernel<NV, RM>(t, tail);
    t.in += RM * t.pix_stride;
    t.out += RM * t.F;
  }
  if (p < pixels) TileDispatchR<NV, RM - 1>(t, static_cast<int>(pixels - p), tail);
}

// All channels of one output row: chunks of 64 channels (4 vectors), then the rest.
void OutputRow(Tile t, int64_t wo) {
  const int64_t F = t.F;
  int64_t f0 = 0;
  for (; f0 + 64 <= F; f0 += 64) {
    Tile u = t;
    u.w += f0;
    u.out += f0;
    if (u.bias != nullptr) u.bias += f0;
    RowSegment<4>(u, wo, 0xFFFF);
  }
  const int64_t rest = F - f0;
  if (rest == 0) return;
  Tile u = t;
  u.w += f0;
  u.out += f0;
  if (u.bias != nullptr) u.bias += f0;
  const int nv = static_cast<int>((rest + 15) / 16);
  const int last = static_cast<int>(rest - 16 * (nv - 1));
  const __mmask16 tail = static_cast<__mmask16>((1u << last) - 1u);
  switch (nv) {
    case 1: RowSegment<1>(u, wo, tail); break;
    case 2: RowSegment<2>(u, wo, tail); break;
    case 3: RowSegment<3>(u, wo, tail); break;
    default: RowSegment<4>(u, wo, tail); break;
  }
}
#elif defined(__AVX2__) && defined(__FMA__)
// AVX2 + FMA (16 ymm registers of 8 floats): the same tiles with 8-channel
// vectors -- R pixels x NV vectors of accumulators, one broadcast input value
// times one weight vector per FMA, in the same (ky, kx, c) order per output
// element as the AVX-512 path (so both give the same bits).  The last vector
// of a row segment is masked (maskload/maskstore) when F is not a multiple of 8.
inline __m256i TailMask(int lanes) {
  alignas(32) static const int32_t kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - lanes));
}

template <int NV, int R, bool MASKED>
inline void TileKernel(const Tile& t, __m256i tail) {
  __m256 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t ky = 0; ky < t.kh; ++ky) {
    const float* __restrict xrow = t.in + ky * t.row_stride;
    const float* __restrict wrow = t.w + ky * t.kwc * t.F;
    for (int64_t j = 0; j < t.kwc; ++j) {
      __m256 wv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        wv[v] = (MASKED && v + 1 == NV) ? _mm256_maskload_ps(wrow + j * t.F + 8 * v, tail)
                                        : _mm256_loadu_ps(wrow + j * t.F + 8 * v);
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256 xb = _mm256_broadcast_ss(xrow + r * t.pix_stride + j);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(xb, wv[v], acc[r][v]);
      }
    }
  }
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const bool masked = MASKED && v + 1 == NV;
    __m256 b = zero;
    if (t.bias != nullptr) b = masked ? _mm256_maskload_ps(t.bias + 8 * v, tail) : _mm256_loadu_ps(t.bias + 8 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m256 y = t.bias != nullptr ? _mm256_add_ps(acc[r][v], b) : acc[r][v];
      // max(0, y) returns y when y is NaN (the second operand), as tf.nn.relu does.
      if (t.relu) y = _mm256_max_ps(zero, y);
      if (masked) {
        _mm256_maskstore_ps(t.out + r * t.F + 8 * v, tail, y);
      } else {
        _mm256_storeu_ps(t.out + r * t.F + 8 * v, y);
      }
    }
  }
}

// Pixels per tile for NV vectors: R * NV accumulators + NV weights + 1 broadcast <= 16 registers.
template <int NV>
constexpr int MaxPixels() {
  return NV == 1 ? 12 : NV == 2 ? 6 : 4;
}

template <int NV, int R, bool MASKED>
inline void TileDispatchR(const Tile& t, int r, __m256i tail) {
  if constexpr (R >= 1) {
    if (r == R) return TileKernel<NV, R, MASKED>(t, tail);
    TileDispatchR<NV, R - 1, MASKED>(t, r, tail);
  }
}

// A row segment of `pixels` output pixels with NV channel vectors.
template <int NV, bool MASKED>
void RowSegment(Tile t, int64_t pixels, __m256i tail) {
  constexpr int RM = MaxPixels<NV>();
  int64_t p = 0;
  for (; p + RM <= pixels; p += RM) {
    TileKernel<NV, RM, MASKED>(t, tail);
    t.in += RM * t.pix_stride;
    t.out += RM * t.F;
  }
  if (p < pixels) TileDispatchR<NV, RM - 1, MASKED>(t, static_cast<int>(pixels - p), tail);
}

// All channels of one output row: chunks of 16 channels (2 vectors), then the rest.
void OutputRow(Tile t, int64_t wo) {
  const int64_t F = t.F;
  const __m256i full = TailMask(8);
  int64_t f0 = 0;
  for (; f0 + 16 <= F; f0 += 16) {
    Tile u = t;
    u.w += f0;
    u.out += f0;
    if (u.bias != nullptr) u.bias += f0;
    RowSegment<2, false>(u, wo, full);
  }
  const int64_t rest = F - f0;
  if (rest == 0) return;
  Tile u = t;
  u.w += f0;
  u.out += f0;
  if (u.bias != nullptr) u.bias += f0;
  if (rest == 8) return RowSegment<1, false>(u, wo, full);
  const int nv = static_cast<int>((rest + 7) / 8);
  const __m256i tail = TailMask(static_cast<int>(rest - 8 * (nv - 1)));
  if (nv == 1) return RowSegment<1, true>(u, wo, tail);
  RowSegment<2, true>(u, wo, tail);
}
#else
// Portable path: the same (ky, kx, c) order per output element.
void OutputRow(Tile t, int64_t wo) {
  std::vector<float> acc(t.F);
  for (int64_t ox = 0; ox < wo; ++ox) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float* px = t.in + ox * t.pix_stride;
    for (int64_t ky = 0; ky < t.kh; ++ky) {
      const float* xrow = px + ky * t.row_stride;
      const float* wrow = t.w + ky * t.kwc * t.F;
      for (int64_t j = 0; j < t.kwc; ++j) {
        const float xv = xrow[j];
        const float* wj = wrow + j * t.F;
        for (int64_t f = 0; f < t.F; ++f) acc[f] = tfevo_math::MulAdd(xv, wj[f], acc[f]);
      }
    }
    float* o = t.out + ox * t.F;
    for (int64_t f = 0; f < t.F; ++f) {
      float y = t.bias != nullptr ? acc[f] + t.bias[f] : acc[f];
      if (t.relu) y = (y < 0.0f) ? 0.0f : y;
      o[f] = y;
    }
  }
}
#endif

using tfevo_parallel::GrainFor;
using tfevo_parallel::ParallelUnits;


template <bool FLAT>
class PopulationConv2DOp : public OpKernel {
 public:
  explicit PopulationConv2DOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<int32_t> strides;
    std::string padding, activation;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strides", &strides));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("padding", &padding));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activation", &activation));
    if (FLAT) {
      std::vector<int32_t> ksize;
      OP_REQUIRES_OK(ctx, ctx->GetAttr("input_scale", &input_scale_));
      OP_REQUIRES_OK(ctx, ctx->GetAttr("kernel_offset", &kernel_offset_));
      OP_REQUIRES_OK(ctx, ctx->GetAttr("kernel_size", &ksize));
      OP_REQUIRES_OK(ctx, ctx->GetAttr("filters", &filters_));
      OP_REQUIRES_OK(ctx, ctx->GetAttr("bias_offset", &bias_offset_));
      OP_REQUIRES(ctx, ksize.size() == 2 && ksize[0] >= 1 && ksize[1] >= 1,
                  tensorflow::errors::InvalidArgument("TfevoPopulationConv2DFlat: kernel_size must be 2 positive ints"));
      kh_ = ksize[0];
      kw_ = ksize[1];
      use_bias_ = bias_offset_ >= 0;
    } else {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("use_bias", &use_bias_));
    }
    OP_REQUIRES(ctx, strides.size() == 2 && strides[0] >= 1 && strides[1] >= 1,
                tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: strides must be 2 positive ints"));
    sh_ = strides[0];
    sw_ = strides[1];
    same_ = padding == "SAME";
    relu_ = activation == "relu";
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& kernel = ctx->input(1);
    const Tensor& bias = ctx->input(FLAT ? 1 : 2);
    const Tensor& idx = ctx->input(FLAT ? 2 : 3);
    OP_REQUIRES(ctx, x.dims() == 5,
                tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: x must be [n, B, H, W, C], got ",
                                                    x.shape().DebugString()));
    OP_REQUIRES(ctx, kernel.dims() == (FLAT ? 2 : 5),
                tensorflow::errors::InvalidArgument(FLAT ? "TfevoPopulationConv2DFlat: params must be [M, D], got "
                                                         : "TfevoPopulationConv2D: kernel must be [M, kh, kw, C, F], got ",
                                                    kernel.shape().DebugString()));
    OP_REQUIRES(ctx, idx.dims() == 1,
                tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: idx must be [n], got ",
                                                    idx.shape().DebugString()));
    const int64_t n = x.dim_size(0), B = x.dim_size(1), H = x.dim_size(2), W = x.dim_size(3), C = x.dim_size(4);
    const int64_t M = kernel.dim_size(0);
    const int64_t kh = FLAT ? kh_ : kernel.dim_size(1), kw = FLAT ? kw_ : kernel.dim_size(2);
    const int64_t F = FLAT ? filters_ : kernel.dim_size(4);
    const int64_t ksize = kh * kw * C * F;
    // Where member p's kernel and bias start, and the member strides.
    const bool half = FLAT && kernel.dtype() == tensorflow::DT_HALF;
    const float* kbase = half ? nullptr : kernel.flat<float>().data();
    int64_t kstride = ksize, bstride = F;
    const float* bbase = nullptr;
    if (FLAT) {
      const int64_t D = kernel.dim_size(1);
      OP_REQUIRES(ctx, kernel_offset_ + ksize <= D,
                  tensorflow::errors::InvalidArgument("TfevoPopulationConv2DFlat: kernel [", kernel_offset_, ", ",
                                                      kernel_offset_ + ksize, ") is outside params rows of ", D));
      OP_REQUIRES(ctx, !use_bias_ || bias_offset_ + F <= D,
                  tensorflow::errors::InvalidArgument("TfevoPopulationConv2DFlat: bias [", bias_offset_, ", ",
                                                      bias_offset_ + F, ") is outside params rows of ", D));
      if (!half) {
        kbase += kernel_offset_;
        kstride = D;
        if (use_bias_) bbase = kernel.flat<float>().data() + bias_offset_;
        bstride = D;
      }
    } else {
      OP_REQUIRES(ctx, kernel.dim_size(3) == C,
                  tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: x has C=", C, " but kernel has C=",
                                                      kernel.dim_size(3)));
      if (use_bias_) {
        OP_REQUIRES(ctx, bias.dims() == 2 && bias.dim_size(0) == M && bias.dim_size(1) == F,
                    tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: bias must be [", M, ", ", F,
                                                        "], got ", bias.shape().DebugString()));
        bbase = bias.flat<float>().data();
      }
    }
    OP_REQUIRES(ctx, idx.dim_size(0) == n,
                tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: x has n=", n, " row-blocks but idx has ",
                                                    idx.dim_size(0), " entries"));
    OP_REQUIRES(ctx, kh >= 1 && kw >= 1,
                tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: empty kernel ",
                                                    kernel.shape().DebugString()));
    const int32_t* ip = idx.flat<int32_t>().data();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, ip[i] >= 0 && ip[i] < M,
                  tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: idx[", i, "] = ", ip[i],
                                                      " is out of range [0, ", M, ")"));
    }
    // float16 params: the kernel and bias of each row-block's member, converted to float32
    // (exactly) into [n, ksize] and [n, F]; the row-blocks then index those (wsel), so the
    // convolution is the float32 one on the same values.
    Tensor kconv, bconv;
    const int32_t* wsel = ip;
    std::vector<int32_t> own;
    if (half) {
      const int64_t D = kernel.dim_size(1);
      const uint16_t* hp = reinterpret_cast<const uint16_t*>(kernel.flat<Eigen::half>().data());
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({n, ksize}), &kconv));
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({n, use_bias_ ? F : 0}), &bconv));
      float* kc = kconv.flat<float>().data();
      float* bc = bconv.flat<float>().data();
      ParallelUnits(ctx, n, GrainFor(ksize), [&](int64_t i) {
        const uint16_t* row = hp + static_cast<int64_t>(ip[i]) * D;
        tfevo_half::ToFloatN(row + kernel_offset_, kc + i * ksize, ksize);
        if (use_bias_) tfevo_half::ToFloatN(row + bias_offset_, bc + i * F, F);
      });
      kbase = kc;
      kstride = ksize;
      bbase = use_bias_ ? bc : nullptr;
      bstride = F;
      own.resize(n);
      for (int64_t i = 0; i < n; ++i) own[i] = static_cast<int32_t>(i);
      wsel = own.data();
    }
    const int64_t ho = OutSize(H, kh, sh_, same_), wo = OutSize(W, kw, sw_, same_);
    OP_REQUIRES(ctx, ho >= 1 && wo >= 1,
                tensorflow::errors::InvalidArgument("TfevoPopulationConv2D: input ", H, "x", W, " is smaller than the ",
                                                    kh, "x", kw, " kernel (padding VALID)"));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, B, ho, wo, F}), &y));
    if (n == 0 || B == 0 || F == 0) return;
    float* yp = y->flat<float>().data();
    if (C == 0) {  // empty sums: bias (or 0), then the activation
      for (int64_t i = 0; i < n; ++i)
        for (int64_t p = 0; p < B * ho * wo; ++p)
          for (int64_t f = 0; f < F; ++f) {
            float v = bbase != nullptr ? 0.0f + bbase[wsel[i] * bstride + f] : 0.0f;
            yp[(i * B * ho * wo + p) * F + f] = (relu_ && v < 0.0f) ? 0.0f : v;
          }
      return;
    }

    // Padded geometry: rows/cols needed by the output, zeros outside the input.
    const int64_t hp = (ho - 1) * sh_ + kh, wp = (wo - 1) * sw_ + kw;
    const int64_t pad_top = same_ ? std::max<int64_t>(hp - H, 0) / 2 : 0;
    const int64_t pad_left = same_ ? std::max<int64_t>(wp - W, 0) / 2 : 0;
    const bool u8 = x.dtype() == tensorflow::DT_UINT8;
    const bool scaled = u8 || input_scale_ != 1.0f;
    const bool need_pad = pad_top > 0 || pad_left > 0 || hp > H || wp > W || scaled;
    const int64_t images = n * B;
    const float* xp = u8 ? nullptr : x.flat<float>().data();
    const uint8_t* xu = u8 ? x.flat<uint8_t>().data() : nullptr;
    const float scale = input_scale_;
    const float* src = xp;
    int64_t img_stride = H * W * C, row_stride = W * C;
    Tensor padded;
    if (need_pad) {
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({images, hp, wp, C}), &padded));
      float* pp = padded.flat<float>().data();
      auto pad = [&](int64_t im) {
        {
          float* dst = pp + im * hp * wp * C;
          for (int64_t r = 0; r < hp; ++r) {
            float* d = dst + r * wp * C;
            const int64_t iy = r - pad_top;
            if (iy < 0 || iy >= H) {
              std::fill(d, d + wp * C, 0.0f);
              continue;
            }
            const int64_t x0 = std::max<int64_t>(0, pad_left), x1 = std::min<int64_t>(wp, pad_left + W);
            std::fill(d, d + x0 * C, 0.0f);
            const int64_t off = (im * H * W + iy * W + (x0 - pad_left)) * C, len = (x1 - x0) * C;
            float* dm = d + x0 * C;
            if (u8) {  // float(x) * scale: the same rounding as tf.cast followed by a float32 multiply
              const uint8_t* su = xu + off;
              for (int64_t e = 0; e < len; ++e) dm[e] = static_cast<float>(su[e]) * scale;
            } else if (scaled) {
              const float* sf = xp + off;
              for (int64_t e = 0; e < len; ++e) dm[e] = sf[e] * scale;
            } else {
              std::memcpy(dm, xp + off, len * sizeof(float));
            }
            std::fill(d + x1 * C, d + wp * C, 0.0f);
          }
        }
      };
      ParallelUnits(ctx, images, GrainFor(hp * wp * C), pad);
      src = pp;
      img_stride = hp * wp * C;
      row_stride = wp * C;
    }

    auto rows = [&](int64_t u) {
      {
        const int64_t im = u / ho, oy = u % ho;
        const int64_t member = wsel[im / B];
        Tile t;
        t.in = src + im * img_stride + oy * sh_ * row_stride;
        t.pix_stride = sw_ * C;
        t.row_stride = row_stride;
        t.kh = kh;
        t.kwc = kw * C;
        t.w = kbase + member * kstride;
        t.F = F;
        t.bias = bbase != nullptr ? bbase + member * bstride : nullptr;
        t.relu = relu_;
        t.out = yp + (im * ho + oy) * wo * F;
        OutputRow(t, wo);
      }
    };
    ParallelUnits(ctx, images * ho, GrainFor(2 * wo * ksize), rows);
  }

 private:
  int64_t sh_ = 1, sw_ = 1;
  bool same_ = true, relu_ = false, use_bias_ = true;
  int64_t kernel_offset_ = 0, bias_offset_ = -1, filters_ = 0, kh_ = 0, kw_ = 0;
  float input_scale_ = 1.0f;
};

REGISTER_KERNEL_BUILDER(Name("TfevoPopulationConv2D").Device(DEVICE_CPU), PopulationConv2DOp<false>);
REGISTER_KERNEL_BUILDER(Name("TfevoPopulationConv2DFlat").Device(DEVICE_CPU).TypeConstraint<float>("Tparams"),
                        PopulationConv2DOp<true>);
REGISTER_KERNEL_BUILDER(Name("TfevoPopulationConv2DFlat").Device(DEVICE_CPU).TypeConstraint<Eigen::half>("Tparams"),
                        PopulationConv2DOp<true>);

}  // namespace tfevo_pop_conv
