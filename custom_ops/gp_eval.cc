// tfevo GP evaluation kernels: a stack machine over prefix-encoded trees.
//
// Trees are three [P, L] tensors (types, values, sizes) in prefix order (see
// tfevo/gp/trees.py).  Each work item is one (tree, chunk of data points)
// pair, so the thread pool is fed from the population and the data axis at
// once ("hybrid" parallelism); inside a work item every node is one tight
// loop over the chunk's points (auto-vectorised).
//
//   GpEval(types, values, sizes, x; num_outputs) -> y [P, K, N]
//   GpMse (types, values, sizes, x, target)      -> mse [P]   (K must be 1)
//
// Results are bitwise reproducible: every point is computed by the same
// packet code path, and GpMse sums squared errors per chunk in point order,
// then over chunks in chunk order (in double), independently of the thread
// count and scheduling.
//
// x is [N, F] (all trees see the same data) or [P, N, F] (one batch per tree,
// e.g. observations of a population of policies).  The protected functions
// must stay identical to the TensorFlow reference in tfevo/gp/trees.py.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "unsupported/Eigen/CXX11/Tensor"

using namespace tensorflow;  // NOLINT

namespace {

constexpr int kPad = 0, kConst = 1, kVar = 2, kFunc = 3, kOut = 4;
constexpr float kEps = 1e-3f;
constexpr float kExpClip = 80.0f;
constexpr int kChunk = 64;

// Function ids: the order of _BUILTINS in tfevo/gp/trees.py.
enum Fn {
  ADD = 0, SUB, MUL, DIV, POW, MAX, MIN, NEG, ABS, SQRT, LOG, EXP, SIN, COS,
  TAN, TANH, SIGMOID, INV, IFLT, SQUARE, CUBE, NUM_FN
};
constexpr int kArity[NUM_FN] = {2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1,
                                1, 1, 1, 1, 1, 1, 1, 4, 1, 1};

struct EvalArgs {
  const int32* types;
  const float* values;
  const int32* sizes;
  const float* xt;     // shared data transposed to [F, N] (or nullptr)
  const float* xp;     // per-tree data [P, N, F] (or nullptr)
  int64_t P, L, N, F;
  int K;
};

// Every node is computed on all kChunk lanes of its (64-byte aligned) stack
// slot, whatever the number of points in the chunk: Eigen then always takes
// its packet path (no scalar head or tail whose split would depend on the
// buffer address or the chunk length), so a point's value depends only on
// the tree and that point - not on the thread, the scheduling or the batch.
using ArrF = Eigen::Array<float, kChunk, 1>;
using MapC = Eigen::Map<const ArrF, Eigen::AlignedMax>;
using MapO = Eigen::Map<ArrF, Eigen::AlignedMax>;

// Applies function `f` to the args (a[0] = first child) on kChunk lanes;
// returns false on an unknown id.  Transcendentals use Eigen's vectorised
// packet math, the same implementation TensorFlow's CPU kernels use.
// Protection covers only the domain (near-zero divisor, base or log
// argument); a NaN argument gives NaN, as in tfevo/gp/trees.py.
inline bool apply(int f, float* const* a, float* out) {
  MapC x(a[0]), y(a[1]);
  MapO o(out);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // lanes to force to NaN, computed before `out` (which aliases an argument)
  // is written
  bool nan_mask = false;
  bool m[kChunk];
  switch (f) {
    case DIV:
      for (int i = 0; i < kChunk; ++i) m[i] = std::isnan(a[0][i]);
      nan_mask = true;
      break;
    case POW: case MAX: case MIN: case IFLT:
      for (int i = 0; i < kChunk; ++i) m[i] = std::isnan(a[0][i]) || std::isnan(a[1][i]);
      nan_mask = true;
      break;
    default: break;
  }
  switch (f) {
    case ADD: o = x + y; break;
    case SUB: o = x - y; break;
    case MUL: o = x * y; break;
    case DIV: o = (y.abs() <= kEps).select(ArrF::Constant(1.0f), x / y); break;
    case POW: o = (x.abs() <= kEps).select(ArrF::Constant(0.0f), x.abs().pow(y)); break;
    case MAX: o = (x > y).select(x, y); break;
    case MIN: o = (x < y).select(x, y); break;
    case NEG: o = -x; break;
    case ABS: o = x.abs(); break;
    case SQRT: o = x.abs().sqrt(); break;
    case LOG: o = (x.abs() <= kEps).select(ArrF::Constant(0.0f), x.abs().log()); break;
    case EXP: o = (x > kExpClip).select(ArrF::Constant(kExpClip), x).exp(); break;
    case SIN: o = x.sin(); break;
    case COS: o = x.cos(); break;
    case TAN: o = x.tan(); break;
    case TANH: o = x.tanh(); break;
    case SIGMOID: o = 1.0f / (1.0f + (-x).exp()); break;
    case INV: o = (x.abs() <= kEps).select(ArrF::Constant(0.0f), ArrF::Constant(1.0f) / x); break;
    case IFLT: {
      MapC c(a[2]), d(a[3]);
      o = (x < y).select(c, d);
      break;
    }
    case SQUARE: o = x * x; break;
    case CUBE: o = x * x * x; break;
    default: return false;
  }
  if (nan_mask)
    for (int i = 0; i < kChunk; ++i)
      if (m[i]) out[i] = nan;
  return true;
}

// A 64-byte aligned stack of (L + 2) slots of kChunk floats, zeroed.
class AlignedStack {
 public:
  explicit AlignedStack(int64_t slots) : buf_(slots * kChunk + 16, 0.0f) {
    const auto addr = reinterpret_cast<std::uintptr_t>(buf_.data());
    data_ = buf_.data() + ((64 - addr % 64) % 64) / sizeof(float);
  }
  float* data() { return data_; }

 private:
  std::vector<float> buf_;
  float* data_;
};

// Evaluates tree p on points [n0, n0+n) into `res` ([K][kChunk] when K > 1,
// else [kChunk]).  `stack` has room for L * kChunk floats.
void eval_chunk(const EvalArgs& A, int64_t p, int64_t n0, int n, float* stack, float* res) {
  const int32* ty = A.types + p * A.L;
  const float* va = A.values + p * A.L;
  const int64_t len = std::min<int64_t>(A.sizes[p * A.L], A.L);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int K = A.K;
  if (K > 1) std::fill(res, res + K * kChunk, 0.0f);
  int sp = 0;  // number of values on the stack
  bool bad = len <= 0;
  for (int64_t j = len - 1; j >= 0 && !bad; --j) {
    const int t = ty[j];
    const float v = va[j];
    if (t == kConst) {
      float* o = stack + sp * kChunk;
      for (int i = 0; i < kChunk; ++i) o[i] = v;
      ++sp;
    } else if (t == kVar) {
      const int64_t k = static_cast<int64_t>(v);
      float* o = stack + sp * kChunk;
      if (k < 0 || k >= A.F) {
        bad = true;
      } else if (A.xt != nullptr) {
        const float* src = A.xt + k * A.N + n0;
        for (int i = 0; i < n; ++i) o[i] = src[i];
      } else {
        const float* src = A.xp + (p * A.N + n0) * A.F + k;
        for (int i = 0; i < n; ++i) o[i] = src[i * A.F];
      }
      for (int i = n; i < kChunk; ++i) o[i] = 0.0f;  // unused lanes: defined values
      ++sp;
    } else if (t == kFunc) {
      const int f = static_cast<int>(v);
      if (f < 0 || f >= NUM_FN || sp < kArity[f]) {
        bad = true;
        break;
      }
      const int ar = kArity[f];
      float* args[4];
      for (int q = 0; q < ar; ++q) args[q] = stack + (sp - 1 - q) * kChunk;
      for (int q = ar; q < 4; ++q) args[q] = args[0];
      float* o = stack + (sp - ar) * kChunk;
      // Coefficient-wise: the result may alias its own arguments.
      apply(f, args, o);
      sp -= ar - 1;
    } else if (t == kOut) {
      const int k = static_cast<int>(v);
      if (sp < 1 || k < 0 || k >= K) {
        if (sp < 1 || K > 1) { bad = true; break; }
        continue;  // K == 1: output nodes are transparent
      }
      if (K > 1) {
        const float* top = stack + (sp - 1) * kChunk;
        float* r = res + k * kChunk;
        for (int i = 0; i < n; ++i) r[i] += top[i];
      }
    } else {
      bad = true;
    }
  }
  if (bad || sp != 1) {
    std::fill(res, res + K * kChunk, nan);
    return;
  }
  if (K == 1) std::copy(stack, stack + n, res);
}

Status check_inputs(OpKernelContext* ctx, EvalArgs* A, Tensor* xt_buf) {
  const Tensor& types = ctx->input(0);
  const Tensor& values = ctx->input(1);
  const Tensor& sizes = ctx->input(2);
  const Tensor& x = ctx->input(3);
  if (types.dims() != 2 || values.shape() != types.shape() || sizes.shape() != types.shape())
    return errors::InvalidArgument("types, values, sizes must all be [P, L]");
  A->P = types.dim_size(0);
  A->L = types.dim_size(1);
  A->types = types.flat<int32>().data();
  A->values = values.flat<float>().data();
  A->sizes = sizes.flat<int32>().data();
  if (x.dims() == 2) {
    A->N = x.dim_size(0);
    A->F = x.dim_size(1);
    TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_FLOAT, TensorShape({A->F, A->N}), xt_buf));
    float* dst = xt_buf->flat<float>().data();
    const float* src = x.flat<float>().data();
    for (int64_t i = 0; i < A->N; ++i)
      for (int64_t f = 0; f < A->F; ++f) dst[f * A->N + i] = src[i * A->F + f];
    A->xt = dst;
    A->xp = nullptr;
  } else if (x.dims() == 3) {
    if (x.dim_size(0) != A->P)
      return errors::InvalidArgument("per-tree x must be [P, N, F] with P = ", A->P);
    A->N = x.dim_size(1);
    A->F = x.dim_size(2);
    A->xt = nullptr;
    A->xp = x.flat<float>().data();
  } else {
    return errors::InvalidArgument("x must be [N, F] or [P, N, F]");
  }
  return OkStatus();
}

int64_t cost_per_chunk(const EvalArgs& A) {
  // rough: average tree length * chunk * a few cycles
  return std::max<int64_t>(1, A.L / 2) * kChunk * 4;
}

class GpEvalOp : public OpKernel {
 public:
  explicit GpEvalOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_outputs", &k_));
    OP_REQUIRES(ctx, k_ >= 1, errors::InvalidArgument("num_outputs must be >= 1"));
  }

  void Compute(OpKernelContext* ctx) override {
    EvalArgs A;
    Tensor xt;
    OP_REQUIRES_OK(ctx, check_inputs(ctx, &A, &xt));
    A.K = k_;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({A.P, A.K, A.N}), &out));
    float* y = out->flat<float>().data();
    const int64_t nchunks = (A.N + kChunk - 1) / kChunk;
    auto work = [&](int64_t begin, int64_t end) {
      AlignedStack stack(A.L + 2);
      std::vector<float> res(A.K * kChunk);
      for (int64_t w = begin; w < end; ++w) {
        const int64_t p = w / nchunks;
        const int64_t c = w % nchunks;
        const int64_t n0 = c * kChunk;
        const int n = static_cast<int>(std::min<int64_t>(kChunk, A.N - n0));
        eval_chunk(A, p, n0, n, stack.data(), res.data());
        for (int k = 0; k < A.K; ++k)
          std::copy(res.data() + k * kChunk, res.data() + k * kChunk + n,
                    y + (p * A.K + k) * A.N + n0);
      }
    };
    auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    workers->ParallelFor(A.P * nchunks, cost_per_chunk(A), work);
  }

 private:
  int k_;
};

class GpMseOp : public OpKernel {
 public:
  explicit GpMseOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    EvalArgs A;
    Tensor xt;
    OP_REQUIRES_OK(ctx, check_inputs(ctx, &A, &xt));
    A.K = 1;
    const Tensor& target = ctx->input(4);
    OP_REQUIRES(ctx, target.dims() == 1 && target.dim_size(0) == A.N,
                errors::InvalidArgument("target must be [N] with N = ", A.N));
    const float* tgt = target.flat<float>().data();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({A.P}), &out));
    float* mse = out->flat<float>().data();
    const int64_t nchunks = (A.N + kChunk - 1) / kChunk;
    Tensor partial_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(DT_DOUBLE, TensorShape({A.P * nchunks}), &partial_t));
    double* partial = partial_t.flat<double>().data();
    auto work = [&](int64_t begin, int64_t end) {
      AlignedStack stack(A.L + 2);
      std::vector<float> res(kChunk);
      for (int64_t w = begin; w < end; ++w) {
        const int64_t p = w / nchunks;
        const int64_t c = w % nchunks;
        const int64_t n0 = c * kChunk;
        const int n = static_cast<int>(std::min<int64_t>(kChunk, A.N - n0));
        eval_chunk(A, p, n0, n, stack.data(), res.data());
        double s = 0.0;
        for (int i = 0; i < n; ++i) {
          const double d = static_cast<double>(res[i]) - static_cast<double>(tgt[n0 + i]);
          s += d * d;
        }
        partial[w] = s;
      }
    };
    auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    workers->ParallelFor(A.P * nchunks, cost_per_chunk(A), work);
    for (int64_t p = 0; p < A.P; ++p) {
      double s = 0.0;
      for (int64_t c = 0; c < nchunks; ++c) s += partial[p * nchunks + c];
      mse[p] = static_cast<float>(s / static_cast<double>(std::max<int64_t>(A.N, 1)));
    }
  }
};

}  // namespace

REGISTER_OP("GpEval")
    .Input("types: int32")
    .Input("values: float")
    .Input("sizes: int32")
    .Input("x: float")
    .Attr("num_outputs: int = 1")
    .Output("y: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      int k;
      TF_RETURN_IF_ERROR(c->GetAttr("num_outputs", &k));
      shape_inference::ShapeHandle x = c->input(3);
      shape_inference::DimensionHandle n = c->UnknownDim();
      if (c->RankKnown(x)) n = c->Dim(x, c->Rank(x) - 2);
      c->set_output(0, c->MakeShape({c->Dim(c->input(0), 0), k, n}));
      return OkStatus();
    });

REGISTER_OP("GpMse")
    .Input("types: int32")
    .Input("values: float")
    .Input("sizes: int32")
    .Input("x: float")
    .Input("target: float")
    .Output("mse: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->MakeShape({c->Dim(c->input(0), 0)}));
      return OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("GpEval").Device(DEVICE_CPU), GpEvalOp);
REGISTER_KERNEL_BUILDER(Name("GpMse").Device(DEVICE_CPU), GpMseOp);
