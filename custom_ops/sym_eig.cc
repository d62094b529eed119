// TfevoSymEig: symmetric eigendecomposition through LAPACK's divide-and-conquer
// ?syevd, for CMA-ES's covariance matrix (issue #2).
//
//   x  T [..., n, n]   symmetric; only its lower triangle is read (as tf.linalg.eigh)
//   e  T [..., n]      eigenvalues, ascending
//   v  T [..., n, n]   v[..., :, i] is the unit eigenvector of e[..., i]
//
// Why: TensorFlow's CPU kernel for tf.linalg.eigh is Eigen's single-threaded
// SelfAdjointEigenSolver (tridiagonal QR iterations).  LAPACK's ?syevd reduces to
// tridiagonal form with blocked level-3 updates and solves the tridiagonal
// problem by divide and conquer (matrix-matrix merges); in OpenBLAS's tuned
// kernels it is ~2-3x faster at n = 1000 on one core.
//
// Which LAPACK: no LAPACK ships with TensorFlow, but every install of our
// dependencies has numpy, whose wheel bundles OpenBLAS (numpy.libs/
// libscipy_openblas64_-*.so: ILP64, symbols scipy_<name>_64_).  The Python side
// (tfevo/linalg.py) finds the library and passes its path as the `lapack` attr;
// the kernel dlopen()s it once per path (RTLD_LOCAL) and looks the routine up
// under the names of the usual builds:
//   scipy_ssyevd_64_ / ssyevd_64_   (64-bit integers: scipy-openblas64, OpenBLAS INTERFACE64)
//   scipy_ssyevd_    / ssyevd_      (32-bit integers: scipy-openblas, reference LAPACK, MKL)
// and fails with a clear error naming the library when none is there.
//
// Threads: `threads` > 0 sets the library's BLAS thread count (OpenBLAS's
// set_num_threads) before a call; 0 leaves it alone.  The Python side loads a
// private copy of numpy's OpenBLAS, so this setting never changes numpy's.
// With threads = 1 the result is bit-reproducible on any machine; batches of
// matrices are then split over TensorFlow's intra-op pool (one matrix per
// task), which never changes any matrix's result.
//
// Layout: TensorFlow's row-major x read as column-major is x^T, so LAPACK is
// asked for its upper triangle (uplo = 'U'), which is x's lower triangle.
// LAPACK returns the eigenvectors as the columns of a column-major matrix,
// i.e. as the *rows* of the row-major buffer; the kernel transposes them into
// v (cache-blocked) and, with canonical_sign, flips each eigenvector so that
// its largest-magnitude component (the first one on ties) is positive, the
// convention of tfevo.linalg's reference path.
//
// Errors: non-finite input raises InvalidArgument like TensorFlow's kernel;
// so does a LAPACK convergence failure (info > 0).

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tfevo_sym_eig {

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

REGISTER_OP("TfevoSymEig")
    .Input("x: T")
    .Attr("T: {float, double}")
    .Attr("lapack: string")
    .Attr("threads: int >= 0 = 1")
    .Attr("canonical_sign: bool = true")
    .Output("e: T")
    .Output("v: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 2, &x));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, -1), c->Dim(x, -2), &n));
      ShapeHandle batch, e, v;
      TF_RETURN_IF_ERROR(c->Subshape(x, 0, -2, &batch));
      TF_RETURN_IF_ERROR(c->Concatenate(batch, c->Vector(n), &e));
      TF_RETURN_IF_ERROR(c->Concatenate(batch, c->Matrix(n, n), &v));
      c->set_output(0, e);
      c->set_output(1, v);
      return Status();
    })
    .Doc(R"doc(
Eigenvalues (ascending) and eigenvectors of symmetric matrices by LAPACK ?syevd.

x: [..., n, n] symmetric matrices; only the lower triangle is read.
lapack: path of a shared library exporting ?syevd (e.g. numpy's bundled OpenBLAS).
threads: BLAS threads per call (> 0 sets the library's thread count; 0 leaves it).
canonical_sign: flip each eigenvector so its largest-|.| component is positive.
e: [..., n] eigenvalues in ascending order.
v: [..., n, n] eigenvectors as columns (v[..., :, i] belongs to e[..., i]).
)doc");

namespace {

// Fortran ?syevd(jobz, uplo, n, a, lda, w, work, lwork, iwork, liwork, info,
// [hidden string lengths]).  The two trailing length arguments are what
// gfortran-compiled LAPACKs expect; C implementations ignore them.
template <typename T, typename I>
using SyevdFn = void (*)(const char*, const char*, const I*, T*, const I*, T*, T*, const I*, I*, const I*,
                         I*, size_t, size_t);
using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();

struct Lapack {
  std::string path;
  bool ilp64 = false;
  void* ssyevd = nullptr;
  void* dsyevd = nullptr;
  void* spotrf = nullptr;  // optional (TfevoCholesky); looked up under the same naming scheme
  void* dpotrf = nullptr;
  SetThreadsFn set_threads = nullptr;
  GetThreadsFn get_threads = nullptr;
  std::mutex thread_mu;  // guards the library-wide thread setting
};

// One handle per path for the life of the process (never dlclose'd: OpenBLAS
// keeps worker threads whose code must stay mapped).
Status GetLapack(const std::string& path, Lapack** out) {
  static std::mutex mu;
  static auto* libs = new std::map<std::string, std::unique_ptr<Lapack>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = libs->find(path);
  if (it != libs->end()) {
    *out = it->second.get();
    return Status();
  }
  if (path.empty()) return tensorflow::errors::InvalidArgument("TfevoSymEig: empty `lapack` library path");
  // RTLD_LOCAL keeps its symbols out of the global scope; RTLD_DEEPBIND makes
  // the library bind its own symbols first even if another copy of the same
  // OpenBLAS was loaded globally by someone else.
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (h == nullptr) {
    const char* err = dlerror();
    return tensorflow::errors::NotFound("TfevoSymEig: cannot load the LAPACK library ", path, ": ",
                                        err ? err : "dlopen failed");
  }
  auto lib = std::make_unique<Lapack>();
  lib->path = path;
  struct Names {
    const char *s, *d;
    bool ilp64;
  };
  static const Names kNames[] = {
      {"scipy_ssyevd_64_", "scipy_dsyevd_64_", true},
      {"ssyevd_64_", "dsyevd_64_", true},
      {"scipy_ssyevd_", "scipy_dsyevd_", false},
      {"ssyevd_", "dsyevd_", false},
  };
  for (const Names& nm : kNames) {
    void* s = dlsym(h, nm.s);
    void* d = dlsym(h, nm.d);
    if (s != nullptr && d != nullptr) {
      lib->ssyevd = s;
      lib->dsyevd = d;
      lib->ilp64 = nm.ilp64;
      // ?potrf under the same prefix/suffix as the ?syevd that was found.
      std::string sp(nm.s), dp(nm.d);
      sp.replace(sp.find("syevd"), 5, "potrf");
      dp.replace(dp.find("syevd"), 5, "potrf");
      lib->spotrf = dlsym(h, sp.c_str());
      lib->dpotrf = dlsym(h, dp.c_str());
      break;
    }
  }
  if (lib->ssyevd == nullptr) {
    return tensorflow::errors::NotFound(
        "TfevoSymEig: ", path,
        " exports no ssyevd/dsyevd (looked for scipy_ssyevd_64_, ssyevd_64_, scipy_ssyevd_, ssyevd_)");
  }
  static const char* kSet[] = {"scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                               "scipy_openblas_set_num_threads", "openblas_set_num_threads"};
  static const char* kGet[] = {"scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                               "scipy_openblas_get_num_threads", "openblas_get_num_threads"};
  for (int i = 0; i < 4 && lib->set_threads == nullptr; ++i) {
    lib->set_threads = reinterpret_cast<SetThreadsFn>(dlsym(h, kSet[i]));
    lib->get_threads = reinterpret_cast<GetThreadsFn>(dlsym(h, kGet[i]));
  }
  *out = lib.get();
  (*libs)[path] = std::move(lib);
  return Status();
}

template <typename T, typename I>
struct Syevd {
  // Eigen-decomposes the n x n column-major matrix `a` in place (eigenvectors
  // as columns) and writes ascending eigenvalues to `w`.  Returns LAPACK's info.
  static I Run(void* fn, I n, T* a, T* w) {
    auto f = reinterpret_cast<SyevdFn<T, I>>(fn);
    const char jobz = 'V', uplo = 'U';
    I lwork = -1, liwork = -1, info = 0, iq = 0;
    T wq = 0;
    f(&jobz, &uplo, &n, a, &n, w, &wq, &lwork, &iq, &liwork, &info, 1, 1);  // workspace query
    if (info != 0) return info;
    lwork = std::max<I>(static_cast<I>(wq) + 1, 1);
    liwork = std::max<I>(iq, 1);
    std::vector<T> work(static_cast<size_t>(lwork));
    std::vector<I> iwork(static_cast<size_t>(liwork));
    f(&jobz, &uplo, &n, a, &n, w, work.data(), &lwork, iwork.data(), &liwork, &info, 1, 1);
    return info;
  }
};

// v[r][i] = s_i * a[i * n + r] (a's column i is eigenvector i), in 32 x 32 tiles;
// s_i = -1 when the largest-|.| component of column i (first on ties) is negative.
template <typename T>
void TransposeCanonical(const T* a, int64_t n, bool canonical, T* v) {
  std::vector<T> sign(n, T(1));
  if (canonical) {
    for (int64_t i = 0; i < n; ++i) {
      const T* col = a + i * n;
      T best = T(-1);
      int64_t arg = 0;
      for (int64_t r = 0; r < n; ++r) {
        const T m = std::abs(col[r]);
        if (m > best) {
          best = m;
          arg = r;
        }
      }
      if (col[arg] < T(0)) sign[i] = T(-1);
    }
  }
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < n; r0 += kTile) {
    const int64_t r1 = std::min(n, r0 + kTile);
    for (int64_t i0 = 0; i0 < n; i0 += kTile) {
      const int64_t i1 = std::min(n, i0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        T* row = v + r * n;
        for (int64_t i = i0; i < i1; ++i) row[i] = sign[i] * a[i * n + r];
      }
    }
  }
}

template <typename T>
class SymEigOp : public OpKernel {
 public:
  explicit SymEigOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string path;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("lapack", &path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threads", &threads_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("canonical_sign", &canonical_));
    OP_REQUIRES_OK(ctx, GetLapack(path, &lib_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dims() >= 2 && x.dim_size(x.dims() - 1) == x.dim_size(x.dims() - 2),
                tensorflow::errors::InvalidArgument("TfevoSymEig: x must be [..., n, n] (square matrices), got ",
                                                    x.shape().DebugString()));
    const int64_t n = x.dim_size(x.dims() - 1);
    TensorShape e_shape = x.shape();
    e_shape.RemoveLastDims(1);
    Tensor *e_t = nullptr, *v_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, e_shape, &e_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x.shape(), &v_t));
    const int64_t batch = n == 0 ? 0 : x.NumElements() / (n * n);
    if (batch == 0) return;
    OP_REQUIRES(ctx, !lib_->ilp64 ? n <= INT32_MAX / 4 : true,
                tensorflow::errors::InvalidArgument("TfevoSymEig: n = ", n, " too large for a 32-bit LAPACK"));
    const T* xp = x.flat<T>().data();
    for (int64_t k = 0; k < x.NumElements(); ++k) {
      OP_REQUIRES(ctx, std::isfinite(xp[k]),
                  tensorflow::errors::InvalidArgument("TfevoSymEig: the input has a non-finite entry (NaN or inf); "
                                                      "self-adjoint eigen decomposition needs finite matrices"));
    }
    T* ep = e_t->flat<T>().data();
    T* vp = v_t->flat<T>().data();
    void* fn = std::is_same<T, float>::value ? lib_->ssyevd : lib_->dsyevd;

    if (threads_ > 0 && lib_->set_threads != nullptr) {
      std::lock_guard<std::mutex> lock(lib_->thread_mu);
      if (lib_->get_threads == nullptr || lib_->get_threads() != threads_) lib_->set_threads(threads_);
    }
    std::vector<int64_t> infos(batch, 0);
    auto one = [&](int64_t b) {
      // LAPACK overwrites its input: work on a copy, then transpose into v.
      std::vector<T> a(xp + b * n * n, xp + (b + 1) * n * n);
      T* w = ep + b * n;
      infos[b] = lib_->ilp64 ? static_cast<int64_t>(Syevd<T, int64_t>::Run(fn, n, a.data(), w))
                             : static_cast<int64_t>(Syevd<T, int32_t>::Run(fn, static_cast<int32_t>(n), a.data(), w));
      if (infos[b] == 0) TransposeCanonical<T>(a.data(), n, canonical_, vp + b * n * n);
    };
    if (batch == 1 || threads_ != 1) {
      for (int64_t b = 0; b < batch; ++b) one(b);
    } else {
      auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
      const int64_t cost = std::max<int64_t>(1, 10 * n * n * n);  // ~flops of one decomposition
      tensorflow::Shard(pool->num_threads, pool->workers, batch, cost, [&](int64_t lo, int64_t hi) {
        for (int64_t b = lo; b < hi; ++b) one(b);
      });
    }
    for (int64_t b = 0; b < batch; ++b) {
      OP_REQUIRES(ctx, infos[b] == 0,
                  tensorflow::errors::InvalidArgument("TfevoSymEig: LAPACK ?syevd failed (info = ", infos[b],
                                                      ") on matrix ", b, "; the input might not be valid"));
    }
  }

 private:
  Lapack* lib_ = nullptr;
  int64_t threads_ = 1;
  bool canonical_ = true;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfevoSymEig").Device(DEVICE_CPU).TypeConstraint<float>("T"), SymEigOp<float>);
REGISTER_KERNEL_BUILDER(Name("TfevoSymEig").Device(DEVICE_CPU).TypeConstraint<double>("T"), SymEigOp<double>);

// ---------------------------------------------------------------------------
// TfevoCholesky: lower Cholesky factor by LAPACK's blocked ?potrf, for the
// Cholesky-factor CMA-ES (tfevo.strategies.cma_es.CholeskyCMAES).
//
//   x  T [..., n, n]   symmetric; only its lower triangle is read (as tf.linalg.cholesky)
//   l  T [..., n, n]   lower triangular, x = l l^T, strict upper triangle 0;
//                      ALL NaN for a matrix that is not (numerically) positive
//                      definite or has a non-finite entry in its lower triangle
//
// Unlike TensorFlow's CPU kernel, a failed factorisation is not an error: the
// caller tests the result for finiteness and decides (the strategy retries with
// diagonal loading).  This is XLA's convention too (NaN output), which is what
// the pure-TF reference (tfevo.linalg.cholesky_reference) uses.
//
// Layout: the row-major lower triangle of x is, read column-major, the upper
// triangle, so LAPACK is called with uplo = 'U' and computes x = U^T U in
// column-major terms; U^T read row-major is exactly l, in place, no transpose.
// Threads and batches: as TfevoSymEig (`threads` OpenBLAS threads per call;
// with 1, batches are split over TensorFlow's intra-op pool, one matrix per task).
REGISTER_OP("TfevoCholesky")
    .Input("x: T")
    .Attr("T: {float, double}")
    .Attr("lapack: string")
    .Attr("threads: int >= 0 = 1")
    .Output("l: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 2, &x));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, -1), c->Dim(x, -2), &n));
      c->set_output(0, x);
      return Status();
    })
    .Doc(R"doc(
Lower Cholesky factors of symmetric positive definite matrices by LAPACK ?potrf.

x: [..., n, n]; only the lower triangle is read.
lapack: path of a shared library exporting ?potrf (e.g. numpy's bundled OpenBLAS).
threads: BLAS threads per call (> 0 sets the library's thread count; 0 leaves it).
l: [..., n, n] lower triangular with x = l l^T; all NaN where x is not positive definite.
)doc");

namespace {

template <typename T, typename I>
using PotrfFn = void (*)(const char*, const I*, T*, const I*, I*, size_t);

template <typename T>
class CholeskyOp : public OpKernel {
 public:
  explicit CholeskyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string path;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("lapack", &path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threads", &threads_));
    OP_REQUIRES_OK(ctx, GetLapack(path, &lib_));
    fn_ = std::is_same<T, float>::value ? lib_->spotrf : lib_->dpotrf;
    OP_REQUIRES(ctx, fn_ != nullptr,
                tensorflow::errors::NotFound("TfevoCholesky: ", path, " exports no ?potrf next to its ?syevd"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dims() >= 2 && x.dim_size(x.dims() - 1) == x.dim_size(x.dims() - 2),
                tensorflow::errors::InvalidArgument("TfevoCholesky: x must be [..., n, n] (square matrices), got ",
                                                    x.shape().DebugString()));
    const int64_t n = x.dim_size(x.dims() - 1);
    Tensor* l_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &l_t));
    const int64_t batch = n == 0 ? 0 : x.NumElements() / (n * n);
    if (batch == 0) return;
    OP_REQUIRES(ctx, lib_->ilp64 || n <= INT32_MAX / 4,
                tensorflow::errors::InvalidArgument("TfevoCholesky: n = ", n, " too large for a 32-bit LAPACK"));
    const T* xp = x.flat<T>().data();
    T* lp = l_t->flat<T>().data();
    if (threads_ > 0 && lib_->set_threads != nullptr) {
      std::lock_guard<std::mutex> lock(lib_->thread_mu);
      if (lib_->get_threads == nullptr || lib_->get_threads() != threads_) lib_->set_threads(threads_);
    }
    auto one = [&](int64_t b) {
      const T* src = xp + b * n * n;
      T* a = lp + b * n * n;
      bool finite = true;
      for (int64_t r = 0; r < n; ++r) {  // copy the lower triangle, zero the strict upper one
        const T* srow = src + r * n;
        T* row = a + r * n;
        for (int64_t c = 0; c <= r; ++c) {
          row[c] = srow[c];
          finite &= std::isfinite(srow[c]);
        }
        std::fill(row + r + 1, row + n, T(0));
      }
      int64_t info = 0;
      if (finite) {
        const char uplo = 'U';
        if (lib_->ilp64) {
          int64_t nn = n, inf = 0;
          reinterpret_cast<PotrfFn<T, int64_t>>(fn_)(&uplo, &nn, a, &nn, &inf, 1);
          info = inf;
        } else {
          int32_t nn = static_cast<int32_t>(n), inf = 0;
          reinterpret_cast<PotrfFn<T, int32_t>>(fn_)(&uplo, &nn, a, &nn, &inf, 1);
          info = inf;
        }
      }
      if (!finite || info != 0) std::fill(a, a + n * n, std::numeric_limits<T>::quiet_NaN());
    };
    if (batch == 1 || threads_ != 1) {
      for (int64_t b = 0; b < batch; ++b) one(b);
    } else {
      auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
      const int64_t cost = std::max<int64_t>(1, n * n * n / 3);
      tensorflow::Shard(pool->num_threads, pool->workers, batch, cost, [&](int64_t lo, int64_t hi) {
        for (int64_t b = lo; b < hi; ++b) one(b);
      });
    }
  }

 private:
  Lapack* lib_ = nullptr;
  void* fn_ = nullptr;
  int64_t threads_ = 1;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfevoCholesky").Device(DEVICE_CPU).TypeConstraint<float>("T"), CholeskyOp<float>);
REGISTER_KERNEL_BUILDER(Name("TfevoCholesky").Device(DEVICE_CPU).TypeConstraint<double>("T"), CholeskyOp<double>);

}  // namespace tfevo_sym_eig
