// TfevoIsoLineEmit: one fused CPU kernel for a MAP-Elites Iso+LineDD batch
// (Vassiliades & Mouret 2018):
//
//   x = clip(x1 + iso_sigma * N(0, I) + line_sigma * N(0, 1) * (x2 - x1))
//
// with parents x1, x2 drawn uniformly among the filled cells of the archive.
//
//   solutions resource float [cells + 1, D]  archive solutions (last row: trash row)
//   occupied  resource bool  [cells + 1]     archive mask (only the first `cells` count)
//
// The two variables are read in place under their shared locks: a
// ReadVariableOp would copy the whole [cells + 1, D] buffer once the variable
// has been scatter-updated (TensorFlow's copy-on-read mode), ~0.5 ms for a
// 10 000 x 100 archive.
//   seed      int32 [2]             the emitter's stateless seed
//   low, high float [D] or [0]      clip bounds (empty: no clipping)
//   x         float [B, D]          output
//
// The random numbers are exactly those of the pure-TensorFlow reference
// (tfevo.qd.emitters.IsoLineEmitter with use_op=False): the seed is split into
// four like tf.random.experimental.stateless_split(seed, 4); parents use
// tf.random.stateless_uniform([B], s[0]) and ([B], s[1]) scaled to the filled
// count; the noise is Box-Muller on tf.random.stateless_uniform([2, h, D+1],
// s[2]) with h = ceil(B/2) (row i takes the cosine, row i + h the sine).  This
// file re-implements TensorFlow's stateless Philox-4x32-10 stream (key
// derivation, counter layout and uint32 -> float mapping) so the uniforms are
// bit-identical; the logs, square roots, sines and cosines are Eigen's
// vectorized ones, so the normals agree with the reference to float rounding.
//
// Why a kernel: the reference is ~25 TensorFlow ops (split, three uniform
// draws, Box-Muller, cumsum + searchsorted for the parents, two gathers, the
// line combination, clip), each writing a [B, D] temporary.  Here the
// uniforms, normals, parents and the result are produced row pair by row pair
// in cache, on TensorFlow's intra-op thread pool: per block of a few row pairs
// the Philox words of the radius and angle ranges, then one register pass
// (word -> float, log, sqrt, and sine and cosine sharing one range reduction;
// the same Eigen packet operations as Eigen's log/sin/cos, so bit for bit the
// same normals, ~25% less work), then the line combination.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <climits>
#include <limits>
#include <vector>

#include "Eigen/Core"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "philox.h"

namespace tfevo {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfevoIsoLineEmit")
    .Input("solutions: resource")
    .Input("occupied: resource")
    .Input("seed: int32")
    .Input("low: float")
    .Input("high: float")
    .Attr("batch_size: int >= 1")
    .Attr("dim: int >= 1")
    .Attr("iso_sigma: float")
    .Attr("line_sigma: float")
    .Output("x: float")
    .SetIsStateful()  // reads mutable archive variables: never constant-folded or merged
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle low;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &low));
      int64_t b;
      TF_RETURN_IF_ERROR(c->GetAttr("batch_size", &b));
      int64_t d;
      TF_RETURN_IF_ERROR(c->GetAttr("dim", &d));
      c->set_output(0, c->MakeShape({c->MakeDim(b), c->MakeDim(d)}));
      return Status();
    })
    .Doc(R"doc(
Iso+LineDD emission for MAP-Elites: parents uniform among filled cells,
x = clip(x1 + iso_sigma * N(0, I) + line_sigma * N(0, 1) * (x2 - x1)).

solutions: resource variable [cells + 1, D] archive solutions (read in place).
occupied: resource variable [cells + 1] bool archive mask; only the first
  cells entries are read.
seed: [2] int32 stateless seed.
low: [D] lower clip bounds, or [0] for no clipping.
high: [D] upper clip bounds, or [0].
x: [batch_size, D] new candidates.
)doc");

namespace {

using namespace tfevo_philox;  // NOLINT: Philox stream shared with normal.cc (philox.h)

// Uniform floats for flat indices [start, start + n) into out (scratch grown as needed).
void Uniforms(const Stream& s, uint64_t start, int64_t n, float* out, std::vector<uint32_t>* scratch) {
  if (n <= 0) return;
  const int64_t ng = static_cast<int64_t>(((start + n - 1) >> 2) - (start >> 2) + 1);
  if (static_cast<int64_t>(scratch->size()) < 4 * ng) scratch->resize(4 * ng);
  tfevo_philox::Uniforms(s, start, n, out, scratch->data());
}


// Box-Muller on raw Philox words, one packet at a time (the reference's
// r = sqrt(-2 log1p(-u0)), t = 2 pi u1, r cos t and r sin t).  The operations
// are exactly those Eigen's array expressions use for log, sqrt, sin and cos
// (plog, psqrt, psincos_float), so the results are bit for bit the same; but
// the uint32 -> float mapping, the radius and both trigonometric functions are
// computed in registers in one pass, and sine and cosine share one range
// reduction (Eigen's psincos_float computes both polynomials and selects).
#if defined(EIGEN_VECTORIZE)
#define TFEVO_FUSED_BOX_MULLER 1
namespace ei = ::Eigen::internal;
typedef ei::packet_traits<float>::type PacketF;
typedef ei::unpacket_traits<PacketF>::integer_packet PacketI;
constexpr int64_t kPacket = ei::unpacket_traits<PacketF>::size;

EIGEN_STRONG_INLINE PacketF WordsToUniform(const uint32_t* w) {  // TensorFlow's Uint32ToFloat
  PacketI b = ei::ploadu<PacketI>(reinterpret_cast<const int32_t*>(w));
  b = ei::por(ei::pand(b, ei::pset1<PacketI>(0x7fffff)), ei::pset1<PacketI>(0x3f800000));
  return ei::psub(ei::preinterpret<PacketF>(b), ei::pset1<PacketF>(1.0f));
}

// sin and cos of x >= 0 below Eigen's "huge" threshold (here x < 2 pi): Eigen's
// psincos_float, with one shared range reduction.
EIGEN_STRONG_INLINE void SinCos(const PacketF& x_in, PacketF* sin_out, PacketF* cos_out) {
  PacketF x = x_in;
  PacketF y = ei::pmul(x, ei::pset1<PacketF>(0.636619746685028076171875f));  // 2 / pi
  PacketF y_round = ei::padd(y, ei::pset1<PacketF>(12582912.f));
  EIGEN_OPTIMIZATION_BARRIER(y_round)
  const PacketI y_int = ei::preinterpret<PacketI>(y_round);
  y = ei::psub(y_round, ei::pset1<PacketF>(12582912.f));
#if defined(EIGEN_VECTORIZE_FMA)
  x = ei::pmadd(y, ei::pset1<PacketF>(-1.57079601287841796875f), x);
  x = ei::pmadd(y, ei::pset1<PacketF>(-3.1391647326017846353352069854736328125e-07f), x);
  x = ei::pmadd(y, ei::pset1<PacketF>(-5.390302529957764765544681040410068817436695098876953125e-15f), x);
#else
  x = ei::pmadd(y, ei::pset1<PacketF>(-1.5703125f), x);
  EIGEN_OPTIMIZATION_BARRIER(x)
  x = ei::pmadd(y, ei::pset1<PacketF>(-0.000483989715576171875f), x);
  EIGEN_OPTIMIZATION_BARRIER(x)
  x = ei::pmadd(y, ei::pset1<PacketF>(1.62865035235881805419921875e-07f), x);
  x = ei::pmadd(y, ei::pset1<PacketF>(5.5644315544167710640977020375430583953857421875e-11f), x);
#endif
  const PacketF sign_mask = ei::pset1frombits<PacketF>(static_cast<uint32_t>(0x80000000u));
  const PacketF sign_sin =
      ei::pand(ei::pxor(x_in, ei::preinterpret<PacketF>(ei::plogical_shift_left<30>(y_int))), sign_mask);
  const PacketF sign_cos = ei::pand(
      ei::preinterpret<PacketF>(ei::plogical_shift_left<30>(ei::padd(y_int, ei::pset1<PacketI>(1)))), sign_mask);
  const PacketF poly_mask =
      ei::preinterpret<PacketF>(ei::pcmp_eq(ei::pand(y_int, ei::pset1<PacketI>(1)), ei::pzero(y_int)));
  const PacketF x2 = ei::pmul(x, x);
  PacketF y1 = ei::pset1<PacketF>(2.4372266125283204019069671630859375e-05f);  // cos polynomial
  y1 = ei::pmadd(y1, x2, ei::pset1<PacketF>(-0.00138865201734006404876708984375f));
  y1 = ei::pmadd(y1, x2, ei::pset1<PacketF>(0.041666619479656219482421875f));
  y1 = ei::pmadd(y1, x2, ei::pset1<PacketF>(-0.5f));
  y1 = ei::pmadd(y1, x2, ei::pset1<PacketF>(1.f));
  PacketF y2 = ei::pset1<PacketF>(-0.0001959234114083702898469196984621021329076029360294342041015625f);  // sin
  y2 = ei::pmadd(y2, x2, ei::pset1<PacketF>(0.0083326873655616851693794799871284340042620897293090820312500000f));
  y2 = ei::pmadd(y2, x2, ei::pset1<PacketF>(-0.1666666203982298255503735617821803316473960876464843750000000000f));
  y2 = ei::pmul(y2, x2);
  y2 = ei::pmadd(y2, x, x);
  *sin_out = ei::pxor(ei::pselect(poly_mask, y2, y1), sign_sin);
  *cos_out = ei::pxor(ei::pselect(poly_mask, y1, y2), sign_cos);
}

// zc[i] = r cos t, zs[i] = r sin t for i < np (a multiple of kPacket); w0, w1
// hold np raw words each (any alignment); zc, zs are packet-aligned.
void BoxMullerWords(const uint32_t* w0, const uint32_t* w1, int64_t np, float* zc, float* zs) {
  const PacketF one = ei::pset1<PacketF>(1.0f), minus_two = ei::pset1<PacketF>(-2.0f);
  const PacketF two_pi = ei::pset1<PacketF>(static_cast<float>(2.0 * M_PI));
  for (int64_t i = 0; i < np; i += kPacket) {
    const PacketF u0 = WordsToUniform(w0 + i), u1 = WordsToUniform(w1 + i);
    const PacketF r = ei::psqrt(ei::pmul(minus_two, ei::plog(ei::psub(one, u0))));  // 1 - u is exact
    PacketF s, c;
    SinCos(ei::pmul(two_pi, u1), &s, &c);
    ei::pstore(zc + i, ei::pmul(r, c));
    ei::pstore(zs + i, ei::pmul(r, s));
  }
}
#endif  // EIGEN_VECTORIZE

class IsoLineEmitOp : public OpKernel {
 public:
  explicit IsoLineEmitOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("batch_size", &batch_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("iso_sigma", &iso_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("line_sigma", &line_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<tensorflow::Var> sol_v, occ_v;
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), &sol_v));
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 1), &occ_v));
    tensorflow::tf_shared_lock lock_sol(*sol_v->mu());
    tensorflow::tf_shared_lock lock_occ(*occ_v->mu());
    const Tensor& sol_t = *sol_v->tensor();
    const Tensor& occ_t = *occ_v->tensor();
    const Tensor& seed_t = ctx->input(2);
    const Tensor& lo_t = ctx->input(3);
    const Tensor& hi_t = ctx->input(4);
    OP_REQUIRES(ctx, sol_t.dtype() == tensorflow::DT_FLOAT && occ_t.dtype() == tensorflow::DT_BOOL,
                tensorflow::errors::InvalidArgument("TfevoIsoLineEmit: solutions must be float, occupied bool"));
    OP_REQUIRES(ctx, sol_t.dims() == 2 && sol_t.dim_size(0) >= 2 && sol_t.dim_size(1) == dim_,
                tensorflow::errors::InvalidArgument("TfevoIsoLineEmit: solutions must be [cells + 1, ", dim_,
                                                    "], got ", sol_t.shape().DebugString()));
    const int64_t rows = sol_t.dim_size(0), dim = sol_t.dim_size(1), cells = rows - 1;
    OP_REQUIRES(ctx, occ_t.dims() == 1 && occ_t.dim_size(0) == rows,
                tensorflow::errors::InvalidArgument("TfevoIsoLineEmit: occupied must be [", rows, "], got ",
                                                    occ_t.shape().DebugString()));
    OP_REQUIRES(ctx, seed_t.NumElements() == 2,
                tensorflow::errors::InvalidArgument("TfevoIsoLineEmit: seed must have 2 elements"));
    const bool clip = lo_t.NumElements() > 0;
    OP_REQUIRES(ctx, !clip || (lo_t.NumElements() == dim && hi_t.NumElements() == dim),
                tensorflow::errors::InvalidArgument("TfevoIsoLineEmit: low/high must be [", dim, "] or empty"));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch_, dim}), &out_t));

    const float* sol = sol_t.flat<float>().data();
    const bool* occ = occ_t.flat<bool>().data();
    const float* lo = clip ? lo_t.flat<float>().data() : nullptr;
    const float* hi = clip ? hi_t.flat<float>().data() : nullptr;
    float* out = out_t->flat<float>().data();
    const int64_t B = batch_;

    // The r-th filled cell, in cell order (what searchsorted on the running count gives).
    std::vector<int32_t> filled;
    filled.reserve(cells);
    for (int64_t c = 0; c < cells; ++c)
      if (occ[c]) filled.push_back(static_cast<int32_t>(c));
    const int64_t nf = static_cast<int64_t>(filled.size());

    // stateless_split(seed, 4): 8 raw int32 from the seed's stream.
    const auto sv = seed_t.flat<int32_t>();
    const Stream base = MakeStream(sv(0), sv(1));
    int32_t split[8];
    for (int i = 0; i < 8; ++i) split[i] = static_cast<int32_t>(Bits(base, i));
    const Stream sp1 = MakeStream(split[0], split[1]);
    const Stream sp2 = MakeStream(split[2], split[3]);
    const Stream noise = MakeStream(split[4], split[5]);

    // Parents: rank = min(int(u * count), count - 1) among the filled cells (cell 0 when empty).
    std::vector<int32_t> parent(2 * B);
    {
      std::vector<float> u(B);
      std::vector<uint32_t> scratch;
      const float count = static_cast<float>(std::max<int64_t>(nf, 1));
      const Stream* ps[2] = {&sp1, &sp2};
      for (int p = 0; p < 2; ++p) {
        Uniforms(*ps[p], 0, B, u.data(), &scratch);
        for (int64_t i = 0; i < B; ++i) {
          int64_t r = static_cast<int32_t>(u[i] * count);
          r = std::min<int64_t>(r, std::max<int64_t>(nf, 1) - 1);
          parent[p * B + i] = nf > 0 ? filled[r] : 0;
        }
      }
    }

    const int64_t d1 = dim + 1, h = (B + 1) / 2;
    const float iso = iso_, line = line_;
    // Rows i and i + h share their uniforms (cosine and sine), so a unit of
    // work is a row pair; blocks of row pairs draw their uniforms in one call.
    // The combination for the rows of row pairs [b0, b0 + nb), from their normals.
    auto combine = [&](int64_t b0, int64_t nb, const float* zc, const float* zs) {
      for (int64_t k = 0; k < nb; ++k) {
        for (int half = 0; half < 2; ++half) {
          const int64_t row = b0 + k + half * h;
          if (row >= B) break;
          const float* z = (half == 0 ? zc : zs) + k * d1;
          const float* x1 = sol + static_cast<int64_t>(parent[row]) * dim;
          const float* x2 = sol + static_cast<int64_t>(parent[B + row]) * dim;
          float* o = out + row * dim;
          const float lz = line * z[dim];
          if (clip) {
            for (int64_t j = 0; j < dim; ++j)
              o[j] = std::max(std::min((x1[j] + iso * z[j]) + lz * (x2[j] - x1[j]), hi[j]), lo[j]);
          } else {
            for (int64_t j = 0; j < dim; ++j) o[j] = (x1[j] + iso * z[j]) + lz * (x2[j] - x1[j]);
          }
        }
      }
    };
    using AVec = std::vector<float, Eigen::aligned_allocator<float>>;
#if defined(TFEVO_FUSED_BOX_MULLER)
    // Blocks of a few row pairs keep their words and normals in L1: Philox
    // words for the radius and the angle ranges, then Box-Muller in registers.
    auto work = [&](int64_t begin, int64_t end) {
      const int64_t block = std::max<int64_t>(1, 1024 / d1);
      const int64_t cap = (block * d1 + kPacket - 1) / kPacket * kPacket;
      AVec zc(cap), zs(cap);
      // words: up to 3 leading words of the first group, then whole packets
      std::vector<uint32_t> w0(cap + 8, 0u), w1(cap + 8, 0u);
      for (int64_t b0 = begin; b0 < end; b0 += block) {
        const int64_t nb = std::min(block, end - b0), n = nb * d1;
        const int64_t np = (n + kPacket - 1) / kPacket * kPacket;
        const uint64_t s0 = static_cast<uint64_t>(b0) * d1, s1 = static_cast<uint64_t>(h + b0) * d1;
        PhiloxGroups(noise, s0 >> 2, static_cast<int64_t>(((s0 + n - 1) >> 2) - (s0 >> 2) + 1), w0.data());
        PhiloxGroups(noise, s1 >> 2, static_cast<int64_t>(((s1 + n - 1) >> 2) - (s1 >> 2) + 1), w1.data());
        // lanes past n read stale words: their results are never used
        BoxMullerWords(w0.data() + (s0 & 3), w1.data() + (s1 & 3), np, zc.data(), zs.data());
        combine(b0, nb, zc.data(), zs.data());
      }
    };
#else
    auto work = [&](int64_t begin, int64_t end) {
      constexpr int64_t kBlock = 32;
      std::vector<uint32_t> scratch;
      // Aligned buffers padded to whole 64-byte packets: Eigen then evaluates
      // every element with the same vectorized log/sin/cos (no scalar head or
      // tail whose position would depend on the block split or the heap
      // address), so results do not depend on threading: runs are reproducible.
      constexpr int64_t kPad = 16;
      const int64_t cap = (kBlock * d1 + kPad - 1) / kPad * kPad;
      AVec u0(cap, 0.5f), u1(cap, 0.5f), zc(cap), zs(cap);
      for (int64_t b0 = begin; b0 < end; b0 += kBlock) {
        const int64_t nb = std::min(kBlock, end - b0), n = nb * d1, np = (n + kPad - 1) / kPad * kPad;
        Uniforms(noise, static_cast<uint64_t>(b0) * d1, n, u0.data(), &scratch);
        Uniforms(noise, static_cast<uint64_t>(h + b0) * d1, n, u1.data(), &scratch);
        std::fill(u0.begin() + n, u0.begin() + np, 0.5f);  // finite padding
        std::fill(u1.begin() + n, u1.begin() + np, 0.5f);
        using Arr = Eigen::Map<Eigen::ArrayXf, Eigen::AlignedMax>;
        Arr a0(u0.data(), np), a1(u1.data(), np), ac(zc.data(), np), as(zs.data(), np);
        a0 = (-2.0f * (1.0f - a0).log()).sqrt();  // radius; 1 - u is exact where the log matters
        a1 = static_cast<float>(2.0 * M_PI) * a1;  // angle
        ac = a0 * a1.cos();
        as = a0 * a1.sin();
        combine(b0, nb, zc.data(), zs.data());
      }
    };
#endif
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    const int64_t cost = 120 * d1;  // ~cycles per row pair
    tensorflow::Shard(pool->num_threads, pool->workers, h, cost, work);
  }

 private:
  int64_t batch_, dim_;
  float iso_, line_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfevoIsoLineEmit").Device(DEVICE_CPU), IsoLineEmitOp);

// ---------------------------------------------------------------------------
// TfevoArchiveInsert: batched MAP-Elites insertion, in place.
//
//   sol_var, fit_var, desc_var, occ_var  resource variables of the archive
//                                        ([cells + 1, D], [cells + 1],
//                                        [cells + 1, k], [cells + 1] bool)
//   thr_var   [] or [one resource]       CMA-MAE's cell thresholds
//                                        ([cells + 1] float), soft archives only
//   solutions float [B, D], fitness float [B], descriptors float [B, k]
//   cell      int32 [B]   each candidate's cell (in [0, cells)), or [0] to
//                         compute grid cells here from grid_lo/hi (double) and
//                         grid_bins [k] and grid_eps (double scalar): pyribs'
//                         rule floor((bins (d - lo) + eps) / (hi - lo)) in
//                         double, clipped to [0, bins) (GridArchive.index_of,
//                         with a non-finite descriptor replaced by 0 as the
//                         reference)
//   status    int32 [B]   0 not added, 1 improved, 2 filled a new cell
//   value     float [B]   improvement (new cell: fitness - qd_offset)
//   keep      [] or [double scalar]     1 - learning_rate, with thr_var
//   cell_out  int32 [B]   the cells used
//
// With thr_var (CMA-MAE, tfevo.qd.archive_base.Archive._add_reference_soft): a
// live candidate can enter when its fitness beats its cell's threshold; the
// best of those per cell (first on ties) enters, whatever the elite's fitness;
// the cell's threshold t becomes keep^k t + (sum / k) (1 - keep^k) over the k
// candidates that beat it (pyribs' batch rule), in double (keep^k by
// repeated squaring, sum in batch order, each product rounded on its own: the
// reference's order of operations), stored as float; value = fitness - t for
// the entering candidates, 0 for the rest.
//
// Same rule as tfevo.qd.archives.Archive._add_reference: non-finite fitness or a
// non-finite descriptor = dead; the best live candidate of each cell (first
// on ties) enters if the cell is empty or it beats the incumbent strictly.
// One pass over the batch with a per-cell winner table, then only the
// winners' rows are written, under the variables' exclusive locks (a buffer
// that is shared with a live tensor is copied first, as TensorFlow's own
// scatter kernels do).

REGISTER_OP("TfevoArchiveInsert")
    .Input("sol_var: resource")
    .Input("fit_var: resource")
    .Input("desc_var: resource")
    .Input("occ_var: resource")
    .Input("thr_var: n_thr * resource")
    .Input("solutions: float")
    .Input("fitness: float")
    .Input("descriptors: float")
    .Input("cell: int32")
    .Input("grid_lo: double")
    .Input("grid_hi: double")
    .Input("grid_bins: int32")
    .Input("grid_eps: double")
    .Input("keep: n_thr * double")
    .Attr("qd_offset: float")
    .Attr("n_thr: int >= 0 = 0")
    .Output("status: int32")
    .Output("value: float")
    .Output("cell_out: int32")
    .SetIsStateful()  // writes the archive variables: never pruned, folded or merged
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle f;
      int n_thr;
      TF_RETURN_IF_ERROR(c->GetAttr("n_thr", &n_thr));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5 + n_thr), 1, &f));
      c->set_output(0, f);
      c->set_output(1, f);
      c->set_output(2, f);
      return Status();
    })
    .Doc(R"doc(
Batched MAP-Elites insertion into the archive variables, in place.
)doc");

// No fused multiply-adds in the insertion (cells, thresholds): every double operation
// rounds as in the TensorFlow reference and in pyribs' NumPy index_of.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
namespace {

// Exclusive access to a variable's buffer, copied first if it is shared.
Status Writable(OpKernelContext* ctx, tensorflow::Var* v, Tensor** out) {
  Tensor* t = v->tensor();
  if (!t->RefCountIsOne()) {
    Tensor copy;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), &copy));
    std::memcpy(copy.data(), t->data(), t->TotalBytes());
    *t = copy;
  }
  *out = t;
  return Status();
}

class ArchiveInsertOp : public OpKernel {
 public:
  explicit ArchiveInsertOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("qd_offset", &offset_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("n_thr", &n_thr_));
    OP_REQUIRES(ctx, n_thr_ == 0 || n_thr_ == 1,
                tensorflow::errors::InvalidArgument("TfevoArchiveInsert: n_thr must be 0 or 1"));
  }

  void Compute(OpKernelContext* ctx) override {
    const int nv = 4 + n_thr_;  // resource inputs; the tensors follow
    tensorflow::core::RefCountPtr<tensorflow::Var> vars[5];
    for (int i = 0; i < nv; ++i)
      OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, i), &vars[i]));
    const Tensor& x_t = ctx->input(nv);
    const Tensor& f_t = ctx->input(nv + 1);
    const Tensor& d_t = ctx->input(nv + 2);
    const Tensor& c_t = ctx->input(nv + 3);
    const int64_t B = f_t.NumElements();
    OP_REQUIRES(ctx, f_t.dims() == 1 && x_t.dims() == 2 && d_t.dims() == 2 && c_t.dims() == 1 &&
                         x_t.dim_size(0) == B && d_t.dim_size(0) == B &&
                         (c_t.dim_size(0) == B || c_t.dim_size(0) == 0),
                tensorflow::errors::InvalidArgument("TfevoArchiveInsert: expected solutions [B, D], fitness [B], "
                                                    "descriptors [B, k], cell [B] or [0]"));
    Tensor* out[3];
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, f_t.shape(), &out[0]));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, f_t.shape(), &out[1]));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, f_t.shape(), &out[2]));
    int32_t* status = out[0]->flat<int32_t>().data();
    float* value = out[1]->flat<float>().data();
    int32_t* cell = out[2]->flat<int32_t>().data();
    const int64_t Kd = d_t.dim_size(1);
    if (c_t.NumElements() == B && B > 0) {  // cells given (CVT)
      std::memcpy(cell, c_t.flat<int32_t>().data(), B * sizeof(int32_t));
    } else {
      const Tensor& lo_t = ctx->input(nv + 4);
      const Tensor& hi_t = ctx->input(nv + 5);
      const Tensor& bins_t = ctx->input(nv + 6);
      const Tensor& eps_t = ctx->input(nv + 7);
      OP_REQUIRES(ctx, c_t.NumElements() == 0 && lo_t.NumElements() == Kd && hi_t.NumElements() == Kd &&
                           bins_t.NumElements() == Kd && eps_t.NumElements() == 1,
                  tensorflow::errors::InvalidArgument(
                      "TfevoArchiveInsert: give cell [B] or grid_lo/hi/bins [k] and grid_eps []"));
      const double* glo = lo_t.flat<double>().data();
      const double* ghi = hi_t.flat<double>().data();
      const int32_t* gb = bins_t.flat<int32_t>().data();
      const double geps = eps_t.flat<double>()(0);
      const float* dd = d_t.flat<float>().data();
      for (int64_t i = 0; i < B; ++i) {
        bool finite = true;
        for (int64_t a = 0; a < Kd; ++a) finite = finite && std::isfinite(dd[i * Kd + a]);
        int64_t c = 0;
        for (int64_t a = 0; a < Kd; ++a) {
          const double v = finite ? static_cast<double>(dd[i * Kd + a]) : 0.0;
          const double nb = static_cast<double>(gb[a]);
          double x = std::floor((nb * (v - glo[a]) + geps) / (ghi[a] - glo[a]));
          x = std::isnan(x) ? 0.0 : std::min(std::max(x, 0.0), nb - 1.0);  // as the reference's clip in double
          const int32_t b = static_cast<int32_t>(x);
          c = c * gb[a] + b;
        }
        cell[i] = static_cast<int32_t>(c);
      }
    }

    if (n_thr_ == 1) {
      InsertSoft(ctx, vars, x_t, f_t, d_t, cell, status, value);
      return;
    }
    tensorflow::mutex_lock l0(*vars[0]->mu()), l1(*vars[1]->mu()), l2(*vars[2]->mu()), l3(*vars[3]->mu());
    Tensor *sol_t, *fit_t, *desc_t, *occ_t;
    OP_REQUIRES_OK(ctx, Writable(ctx, vars[0].get(), &sol_t));
    OP_REQUIRES_OK(ctx, Writable(ctx, vars[1].get(), &fit_t));
    OP_REQUIRES_OK(ctx, Writable(ctx, vars[2].get(), &desc_t));
    OP_REQUIRES_OK(ctx, Writable(ctx, vars[3].get(), &occ_t));
    const int64_t rows = fit_t->NumElements(), cells = rows - 1;
    const int64_t D = x_t.dim_size(1), K = d_t.dim_size(1);
    OP_REQUIRES(ctx, sol_t->dims() == 2 && sol_t->dim_size(0) == rows && sol_t->dim_size(1) == D &&
                         desc_t->dims() == 2 && desc_t->dim_size(0) == rows && desc_t->dim_size(1) == K &&
                         occ_t->NumElements() == rows,
                tensorflow::errors::InvalidArgument("TfevoArchiveInsert: batch and archive shapes disagree"));
    float* a_sol = sol_t->flat<float>().data();
    float* a_fit = fit_t->flat<float>().data();
    float* a_desc = desc_t->flat<float>().data();
    bool* a_occ = occ_t->flat<bool>().data();
    const float* x = x_t.flat<float>().data();
    const float* fr = f_t.flat<float>().data();
    const float* d = d_t.flat<float>().data();

    std::vector<float> f(B);
    std::vector<char> alive(B);
    std::vector<int32_t> winner(cells, -1);
    for (int64_t i = 0; i < B; ++i) {
      float v = fr[i];
      if (!std::isfinite(v)) v = -INFINITY;  // every non-finite fitness is the worst
      f[i] = v;
      bool ok = std::isfinite(v);
      for (int64_t j = 0; j < K && ok; ++j) ok = std::isfinite(d[i * K + j]);
      alive[i] = ok;
      if (!ok) {
        status[i] = 0;
        value[i] = 0.0f;
        continue;
      }
      const int32_t c = cell[i];
      OP_REQUIRES(ctx, c >= 0 && c < cells,
                  tensorflow::errors::InvalidArgument("TfevoArchiveInsert: cell ", c, " out of [0, ", cells, ")"));
      const int32_t w = winner[c];
      if (w < 0 || v > f[w]) winner[c] = static_cast<int32_t>(i);
      // status/value against the incumbent before this batch
      const bool occ = a_occ[c];
      const bool improve = occ && v > a_fit[c];
      value[i] = !occ ? v - offset_ : (improve ? v - a_fit[c] : 0.0f);
      status[i] = 0;
    }
    for (int64_t i = 0; i < B; ++i) {
      if (!alive[i]) continue;
      const int32_t c = cell[i];
      if (winner[c] != i) continue;
      const bool occ = a_occ[c];
      if (occ && !(f[i] > a_fit[c])) continue;
      status[i] = occ ? 1 : 2;
    }
    // write the entering winners (after all statuses used the pre-batch incumbents)
    for (int64_t i = 0; i < B; ++i) {
      if (status[i] == 0) continue;
      const int32_t c = cell[i];
      std::memcpy(a_sol + static_cast<int64_t>(c) * D, x + i * D, D * sizeof(float));
      std::memcpy(a_desc + static_cast<int64_t>(c) * K, d + i * K, K * sizeof(float));
      a_fit[c] = f[i];
      a_occ[c] = true;
    }
  }

 private:
  // CMA-MAE's insertion against the cell thresholds (see the op's comment).
  void InsertSoft(OpKernelContext* ctx, tensorflow::core::RefCountPtr<tensorflow::Var>* vars, const Tensor& x_t,
                  const Tensor& f_t, const Tensor& d_t, const int32_t* cell, int32_t* status, float* value) {
    const Tensor& keep_t = ctx->input(4 + n_thr_ + 8);
    OP_REQUIRES(ctx, keep_t.NumElements() == 1,
                tensorflow::errors::InvalidArgument("TfevoArchiveInsert: keep must be a scalar"));
    const double keep = keep_t.flat<double>()(0);
    const int64_t B = f_t.NumElements();
    tensorflow::mutex_lock l0(*vars[0]->mu()), l1(*vars[1]->mu()), l2(*vars[2]->mu()), l3(*vars[3]->mu()),
        l4(*vars[4]->mu());
    Tensor *sol_t, *fit_t, *desc_t, *occ_t, *thr_t;
    OP_REQUIRES_OK(ctx, Writable(ctx, vars[0].get(), &sol_t));
    OP_REQUIRES_OK(ctx, Writable(ctx, vars[1].get(), &fit_t));
    OP_REQUIRES_OK(ctx, Writable(ctx, vars[2].get(), &desc_t));
    OP_REQUIRES_OK(ctx, Writable(ctx, vars[3].get(), &occ_t));
    OP_REQUIRES_OK(ctx, Writable(ctx, vars[4].get(), &thr_t));
    const int64_t rows = fit_t->NumElements(), cells = rows - 1;
    const int64_t D = x_t.dim_size(1), K = d_t.dim_size(1);
    OP_REQUIRES(ctx, sol_t->dims() == 2 && sol_t->dim_size(0) == rows && sol_t->dim_size(1) == D &&
                         desc_t->dims() == 2 && desc_t->dim_size(0) == rows && desc_t->dim_size(1) == K &&
                         occ_t->NumElements() == rows && thr_t->NumElements() == rows &&
                         thr_t->dtype() == tensorflow::DT_FLOAT,
                tensorflow::errors::InvalidArgument("TfevoArchiveInsert: batch and archive shapes disagree"));
    float* a_sol = sol_t->flat<float>().data();
    float* a_fit = fit_t->flat<float>().data();
    float* a_desc = desc_t->flat<float>().data();
    bool* a_occ = occ_t->flat<bool>().data();
    float* a_thr = thr_t->flat<float>().data();
    const float* x = x_t.flat<float>().data();
    const float* fr = f_t.flat<float>().data();
    const float* d = d_t.flat<float>().data();

    std::vector<float> f(B);
    std::vector<char> can(B);
    std::vector<int32_t> winner(cells, -1), count(cells, 0);
    std::vector<double> total(cells, 0.0);
    for (int64_t i = 0; i < B; ++i) {
      status[i] = 0;
      value[i] = 0.0f;
      const float v = fr[i];
      bool ok = std::isfinite(v);
      for (int64_t j = 0; j < K && ok; ++j) ok = std::isfinite(d[i * K + j]);
      can[i] = 0;
      if (!ok) continue;
      const int32_t c = cell[i];
      OP_REQUIRES(ctx, c >= 0 && c < cells,
                  tensorflow::errors::InvalidArgument("TfevoArchiveInsert: cell ", c, " out of [0, ", cells, ")"));
      f[i] = v;
      if (!(v > a_thr[c])) continue;
      can[i] = 1;
      count[c] += 1;
      total[c] += static_cast<double>(v);
      const int32_t w = winner[c];
      if (w < 0 || v > f[w]) winner[c] = static_cast<int32_t>(i);
    }
    // statuses and values against the pre-batch thresholds, then the writes
    for (int64_t i = 0; i < B; ++i) {
      if (!can[i] || winner[cell[i]] != i) continue;
      const int32_t c = cell[i];
      status[i] = a_occ[c] ? 1 : 2;
      value[i] = f[i] - a_thr[c];
    }
    for (int64_t i = 0; i < B; ++i) {
      if (status[i] == 0) continue;
      const int32_t c = cell[i];
      const int32_t k = count[c];
      double ratio = 1.0, p = keep;  // keep^k by repeated squaring, as the reference
      for (int32_t bit = 1; bit <= k && bit > 0; bit <<= 1) {
        if (k & bit) ratio = ratio * p;
        p = p * p;
      }
      // each product rounded on its own (no fused multiply-add), as the reference's separate ops
      volatile double old_part = ratio * static_cast<double>(a_thr[c]);
      volatile double new_part = (total[c] / static_cast<double>(k)) * (1.0 - ratio);
      a_thr[c] = static_cast<float>(old_part + new_part);
      std::memcpy(a_sol + static_cast<int64_t>(c) * D, x + i * D, D * sizeof(float));
      std::memcpy(a_desc + static_cast<int64_t>(c) * K, d + i * K, K * sizeof(float));
      a_fit[c] = f[i];
      a_occ[c] = true;
    }
  }

  float offset_;
  int n_thr_;
};

}  // namespace
#pragma GCC pop_options

REGISTER_KERNEL_BUILDER(Name("TfevoArchiveInsert").Device(DEVICE_CPU), ArchiveInsertOp);

// ---------------------------------------------------------------------------
// TfevoNearestCentroid: exact nearest centroid (CVT archive cell) per query,
// with the bucket tables of tfevo.qd.archives.CVTArchive._build_buckets.
//
//   descriptors float [B, k]; centroids float [n, k]
//   table int32 [(g + 2)^k, m]  centroid indices per padded bin (n = empty slot)
//   nbr   int32 [3^k]           flat offsets of the neighbouring bins
//   lo, w float [k]; strides int32 [k]; attrs g, wmin2
//   cell  int32 [B]
//
// A query compares the centroids of its 3^k neighbouring bins; the best is
// provably the nearest when its squared distance is below wmin2 (every other
// centroid is at least one bin width away), otherwise the query is answered
// by an exact scan over all centroids.  Squared distances are computed in
// double from the float inputs and summed over the k dimensions in order,
// without fused multiply-adds, so a query far outside the box (where float
// differences lose the centroids' low bits) still finds its nearest centroid,
// and the pure-TensorFlow reference gets the same answer; ties go to the
// lowest centroid index (as argmin).

REGISTER_OP("TfevoNearestCentroid")
    .Input("descriptors: float")
    .Input("centroids: float")
    .Input("table: int32")
    .Input("nbr: int32")
    .Input("lo: float")
    .Input("w: float")
    .Input("strides: int32")
    .Attr("g: int >= 1")
    .Attr("wmin2: float")
    .Output("cell: int32")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle d;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &d));
      c->set_output(0, c->Vector(c->Dim(d, 0)));
      return Status();
    })
    .Doc(R"doc(
Exact nearest centroid per descriptor through a bucket grid (CVT archives).
)doc");

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
namespace {

// Squared distance in double, summed over the k dimensions in order (no fused
// multiply-add: the pragma above), as the reference's ordered float64 sum.
inline double CentroidDist2(const float* q, const float* c, int64_t K) {
  double s = 0.0;
  for (int64_t a = 0; a < K; ++a) {
    const double e = static_cast<double>(q[a]) - static_cast<double>(c[a]);
    s += e * e;
  }
  return s;
}

class NearestCentroidOp : public OpKernel {
 public:
  explicit NearestCentroidOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("g", &g_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("wmin2", &wmin2_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& d_t = ctx->input(0);
    const Tensor& c_t = ctx->input(1);
    const Tensor& t_t = ctx->input(2);
    const Tensor& nbr_t = ctx->input(3);
    OP_REQUIRES(ctx, d_t.dims() == 2 && c_t.dims() == 2 && d_t.dim_size(1) == c_t.dim_size(1) && t_t.dims() == 2,
                tensorflow::errors::InvalidArgument("TfevoNearestCentroid: descriptors [B, k], centroids [n, k], "
                                                    "table [bins, m] expected"));
    const int64_t B = d_t.dim_size(0), K = d_t.dim_size(1), n = c_t.dim_size(0);
    const int64_t nbins = t_t.dim_size(0), m = t_t.dim_size(1), nn = nbr_t.NumElements();
    OP_REQUIRES(ctx, ctx->input(4).NumElements() == K && ctx->input(5).NumElements() == K &&
                         ctx->input(6).NumElements() == K,
                tensorflow::errors::InvalidArgument("TfevoNearestCentroid: lo, w, strides must have k entries"));
    Tensor* out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({B}), &out_t));
    const float* d = d_t.flat<float>().data();
    const float* c = c_t.flat<float>().data();
    const int32_t* table = t_t.flat<int32_t>().data();
    const int32_t* nbr = nbr_t.flat<int32_t>().data();
    const float* lo = ctx->input(4).flat<float>().data();
    const float* w = ctx->input(5).flat<float>().data();
    const int32_t* strides = ctx->input(6).flat<int32_t>().data();
    int32_t* out = out_t->flat<int32_t>().data();
    const int64_t g = g_;
    const double wmin2 = static_cast<double>(wmin2_);
    auto dist = [&](const float* q, int64_t j) { return CentroidDist2(q, c + j * K, K); };
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* q = d + i * K;
        int64_t home = 0;
        for (int64_t a = 0; a < K; ++a) {
          const float x = std::floor((q[a] - lo[a]) / w[a]);
          int64_t b = 0;  // NaN and -inf land in bin 0, as TF's clipped cast does
          if (x >= static_cast<float>(g - 1)) b = g - 1;
          else if (x > 0.0f) b = static_cast<int64_t>(x);
          home += (b + 1) * strides[a];
        }
        double best = INFINITY;
        int32_t arg = static_cast<int32_t>(n);
        for (int64_t o = 0; o < nn; ++o) {
          const int64_t bin = home + nbr[o];
          if (bin < 0 || bin >= nbins) continue;
          const int32_t* row = table + bin * m;
          for (int64_t s = 0; s < m; ++s) {
            const int32_t j = row[s];
            if (j >= n) break;  // slots are filled in order; n marks the end
            const double e = dist(q, j);
            if (e < best || (e == best && j < arg)) {
              best = e;
              arg = j;
            }
          }
        }
        if (!(best < wmin2)) {  // not provably the nearest: exact scan
          best = INFINITY;
          arg = 0;
          for (int64_t j = 0; j < n; ++j) {
            const double e = dist(q, j);
            if (e < best) {
              best = e;
              arg = static_cast<int32_t>(j);
            }
          }
        }
        out[i] = arg;
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(pool->num_threads, pool->workers, B, 40 * nn * m * K + 50, work);
  }

 private:
  int64_t g_;
  float wmin2_;
};

}  // namespace
#pragma GCC pop_options

REGISTER_KERNEL_BUILDER(Name("TfevoNearestCentroid").Device(DEVICE_CPU), NearestCentroidOp);

}  // namespace tfevo
