// TfevoIndexedMatmul: out[i] = x[i] @ w[idx[i]] for the active members of a
// population (CPU kernel).
//
//   x   float [n, b, k]   inputs of the n active members (b rows each)
//   w   float [M, k, m]   weight matrices of the whole population
//   idx int32 [n]         member of w used by each row-block of x
//   out float [n, b, m]
//
// Only the selected weight matrices are read, in place: there is no gather
// copy of w.  Work is split over (member, column block) units and run on
// TensorFlow's intra-op thread pool; each unit is one Eigen matrix product
// (GEMM, or GEMV when b == 1) on row-major maps of the inputs.  Out-of-range
// indices are rejected with InvalidArgument before any work starts.
//
// The pure-TensorFlow reference is tf.matmul(x, tf.gather(w, idx))
// (tfevo.nn.indexed.indexed_matmul_reference); tests check both agree.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "Eigen/Core"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

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
// Columns accumulated per pass over the weight rows (the accumulators stay in L1).
constexpr int64_t kStreamCols = 1024;
// Rows summed per block before adding into the total (bounds rounding growth).
constexpr int64_t kSumBlock = 64;

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
    const float* xp = x.flat<float>().data();
    const float* wp = w.flat<float>().data();

    // Column blocks keep units reasonably sized when n is small and m large.
    const int64_t col_block = m <= 256 ? m : 128;
    const int64_t num_cb = (m + col_block - 1) / col_block;
    const int64_t units = n * num_cb;
    const int64_t cost = std::max<int64_t>(1, 2 * b * k * col_block);

    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using Stride = Eigen::OuterStride<>;
    if (b <= kMaxStreamRows) {
      // Few rows per member (one observation per step): the product is
      // memory-bound on reading w[idx[i]].  Stream the weight block row by
      // row (contiguous, read once) and update all b accumulators from each
      // row (a vectorizable axpy).  Eigen's general product would pack
      // (copy) the weight block first and so read it twice.
      const int64_t scb = std::min<int64_t>(m, kStreamCols);
      const int64_t s_num_cb = (m + scb - 1) / scb;
      auto stream = [&](int64_t begin, int64_t end) {
        std::vector<float> buf(2 * b * scb);
        float* __restrict acc = buf.data();
        float* __restrict tot = acc + b * scb;
        for (int64_t u = begin; u < end; ++u) {
          const int64_t i = u / s_num_cb;
          const int64_t c0 = (u % s_num_cb) * scb;
          const int64_t cw = std::min(scb, m - c0);
          const float* __restrict xi = xp + i * b * k;
          const float* __restrict wi = wp + static_cast<int64_t>(ip[i]) * k * m + c0;
          // Two-level summation (blocks of kSumBlock rows, then over blocks)
          // keeps the rounding error close to a blocked GEMM's for large k.
          std::fill(tot, tot + b * cw, 0.0f);
          for (int64_t k0 = 0; k0 < k; k0 += kSumBlock) {
            const int64_t k1 = std::min(k, k0 + kSumBlock);
            std::fill(acc, acc + b * cw, 0.0f);
            for (int64_t kk = k0; kk < k1; ++kk) {
              const float* __restrict wrow = wi + kk * m;
              for (int64_t r = 0; r < b; ++r) {
                const float xv = xi[r * k + kk];
                float* __restrict ar = acc + r * cw;
                for (int64_t c = 0; c < cw; ++c) ar[c] += xv * wrow[c];
              }
            }
            for (int64_t c = 0; c < b * cw; ++c) tot[c] += acc[c];
          }
          for (int64_t r = 0; r < b; ++r) {
            std::copy(tot + r * cw, tot + (r + 1) * cw, op + (i * b + r) * m + c0);
          }
        }
      };
      auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
      tensorflow::Shard(pool->num_threads, pool->workers, n * s_num_cb,
                        std::max<int64_t>(1, 2 * b * k * scb), stream);
      return;
    }
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t i = u / num_cb;
        const int64_t c0 = (u % num_cb) * col_block;
        const int64_t cw = std::min(col_block, m - c0);
        Eigen::Map<const RowMat> xi(xp + i * b * k, b, k);
        Eigen::Map<const RowMat, 0, Stride> wi(wp + static_cast<int64_t>(ip[i]) * k * m + c0, k, cw,
                                                Stride(m));
        Eigen::Map<RowMat, 0, Stride> oi(op + i * b * m + c0, b, cw, Stride(m));
        oi.noalias() = xi * wi;
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(pool->num_threads, pool->workers, units, cost, work);
  }
};

REGISTER_KERNEL_BUILDER(Name("TfevoIndexedMatmul").Device(DEVICE_CPU), IndexedMatmulOp);

}  // namespace tfevo
