// TfevoSymEig: symmetric eigendecomposition through LAPACK's divide-and-conquer
// ?syevd, for CMA-ES's covariance matrix.
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
// set_num_threads) before a call; 0 leaves it alone.  With threads = 1 and
// n >= 257, ?syevd's three steps are called one by one and the last (the
// back-transformation, ~1/3 of the time) is split into column blocks fixed by n
// that run on TensorFlow's intra-op pool (SplitSyevd below).  The Python side loads a
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
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "parallel_units.h"
#include "var_locks.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TFEVO_TRI_AVX2 1
#endif

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
  void* strmm = nullptr;  // optional (TfevoTriangular, TfevoSyrkUpdate): BLAS under the same scheme
  void* dtrmm = nullptr;
  void* strsm = nullptr;
  void* dtrsm = nullptr;
  void* ssyrk = nullptr;
  void* dsyrk = nullptr;
  void* sgemm = nullptr;  // optional (the tiled Cholesky and rank-k update)
  void* dgemm = nullptr;
  void* ssytrd = nullptr;  // optional (?syevd's three steps, SplitSyevd)
  void* dsytrd = nullptr;
  void* sstedc = nullptr;
  void* dstedc = nullptr;
  void* sormtr = nullptr;
  void* dormtr = nullptr;
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
      auto sym = [&](const char* routine) {
        std::string nm2(nm.s);
        nm2.replace(nm2.find("ssyevd"), 6, routine);
        return dlsym(h, nm2.c_str());
      };
      lib->strmm = sym("strmm");
      lib->dtrmm = sym("dtrmm");
      lib->strsm = sym("strsm");
      lib->dtrsm = sym("dtrsm");
      lib->ssyrk = sym("ssyrk");
      lib->dsyrk = sym("dsyrk");
      lib->sgemm = sym("sgemm");
      lib->dgemm = sym("dgemm");
      lib->ssytrd = sym("ssytrd");
      lib->dsytrd = sym("dsytrd");
      lib->sstedc = sym("sstedc");
      lib->dstedc = sym("dstedc");
      lib->sormtr = sym("sormtr");
      lib->dormtr = sym("dormtr");
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

// The constructor part every LAPACK/BLAS op here shares: its `lapack` attr (the
// library path, also returned for error messages) opened through GetLapack.
Status OpenLapackAttr(OpKernelConstruction* ctx, Lapack** lib, std::string* path) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("lapack", path));
  return GetLapack(*path, lib);
}

// The library-wide BLAS thread count (> 0 sets it; 0 leaves it alone).
void SetThreads(Lapack* lib, int64_t threads) {
  if (threads <= 0 || lib->set_threads == nullptr) return;
  std::lock_guard<std::mutex> lock(lib->thread_mu);
  if (lib->get_threads == nullptr || lib->get_threads() != threads) lib->set_threads(static_cast<int>(threads));
}

void SetOneThread(Lapack* lib) { SetThreads(lib, 1); }

// ---------------------------------------------------------------------------
// Tiled lower-triangle kernels on one BLAS thread per tile, tiles spread over
// TensorFlow's intra-op pool (used by TfevoCholesky and TfevoSyrkUpdate when
// `threads` = 1, the default).
//
// Why: OpenBLAS's own threads spin after every call and compete with
// TensorFlow's pool on a 2-core machine (measured slower with 2 BLAS threads),
// while one BLAS thread leaves a core idle.  Here the work is cut into fixed
// units on a grid of kTile x kTile tiles -- one tile (?trsm, ?potrf) or one row
// strip of tiles (one ?gemm, plus ?syrk on its diagonal tile) -- each computed
// by single-threaded BLAS calls, and the units of one step are shared out by
// ParallelUnits.  The units, and so every bit of the result, are fixed by n:
// they never depend on the number of threads.
//
// Layout: a row-major matrix read column-major is its transpose, so the lower
// triangle (row-major) is handled as the upper triangle (column-major).
template <typename T>
struct Blas {
  Lapack* lib;
  template <typename I>
  using Gemm = void (*)(const char*, const char*, const I*, const I*, const I*, const T*, const T*, const I*,
                        const T*, const I*, const T*, T*, const I*, size_t, size_t);
  template <typename I>
  using Syrk = void (*)(const char*, const char*, const I*, const I*, const T*, const T*, const I*, const T*, T*,
                        const I*, size_t, size_t);
  template <typename I>
  using Trsm = void (*)(const char*, const char*, const char*, const char*, const I*, const I*, const T*, const T*,
                        const I*, T*, const I*, size_t, size_t, size_t, size_t);
  template <typename I>
  using Potrf = void (*)(const char*, const I*, T*, const I*, I*, size_t);
  static constexpr bool kF = std::is_same<T, float>::value;

  bool ok() const {
    return (kF ? lib->sgemm : lib->dgemm) && (kF ? lib->ssyrk : lib->dsyrk) && (kF ? lib->strsm : lib->dtrsm) &&
           (kF ? lib->spotrf : lib->dpotrf);
  }
  template <typename I>
  void GemmI(char ta, char tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
             int64_t ldb, T beta, T* c, int64_t ldc) const {
    const I mm = m, nn = n, kk = k, la = lda, lb = ldb, lc = ldc;
    reinterpret_cast<Gemm<I>>(kF ? lib->sgemm : lib->dgemm)(&ta, &tb, &mm, &nn, &kk, &alpha, a, &la, b, &lb, &beta, c,
                                                            &lc, 1, 1);
  }
  void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
            int64_t ldb, T beta, T* c, int64_t ldc) const {
    if (m == 0 || n == 0) return;
    if (lib->ilp64) GemmI<int64_t>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else GemmI<int32_t>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  template <typename I>
  void SyrkI(char uplo, char tr, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, T beta, T* c,
             int64_t ldc) const {
    const I nn = n, kk = k, la = lda, lc = ldc;
    reinterpret_cast<Syrk<I>>(kF ? lib->ssyrk : lib->dsyrk)(&uplo, &tr, &nn, &kk, &alpha, a, &la, &beta, c, &lc, 1, 1);
  }
  void syrk(char uplo, char tr, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, T beta, T* c,
            int64_t ldc) const {
    if (n == 0) return;
    if (lib->ilp64) SyrkI<int64_t>(uplo, tr, n, k, alpha, a, lda, beta, c, ldc);
    else SyrkI<int32_t>(uplo, tr, n, k, alpha, a, lda, beta, c, ldc);
  }
  template <typename I>
  void TrsmI(char side, char uplo, char ta, char diag, int64_t m, int64_t n, T alpha, const T* a, int64_t lda, T* b,
             int64_t ldb) const {
    const I mm = m, nn = n, la = lda, lb = ldb;
    reinterpret_cast<Trsm<I>>(kF ? lib->strsm : lib->dtrsm)(&side, &uplo, &ta, &diag, &mm, &nn, &alpha, a, &la, b,
                                                            &lb, 1, 1, 1, 1);
  }
  void trsm(char side, char uplo, char ta, char diag, int64_t m, int64_t n, T alpha, const T* a, int64_t lda, T* b,
            int64_t ldb) const {
    if (m == 0 || n == 0) return;
    if (lib->ilp64) TrsmI<int64_t>(side, uplo, ta, diag, m, n, alpha, a, lda, b, ldb);
    else TrsmI<int32_t>(side, uplo, ta, diag, m, n, alpha, a, lda, b, ldb);
  }
  int64_t potrf(int64_t n, T* a, int64_t lda) const {  // column-major upper = row-major lower
    const char uplo = 'U';
    if (lib->ilp64) {
      int64_t nn = n, la = lda, info = 0;
      reinterpret_cast<Potrf<int64_t>>(kF ? lib->spotrf : lib->dpotrf)(&uplo, &nn, a, &la, &info, 1);
      return info;
    }
    int32_t nn = static_cast<int32_t>(n), la = static_cast<int32_t>(lda), info = 0;
    reinterpret_cast<Potrf<int32_t>>(kF ? lib->spotrf : lib->dpotrf)(&uplo, &nn, a, &la, &info, 1);
    return info;
  }
};

constexpr int64_t kTile = 128;

// Units are shared out over TensorFlow's intra-op pool by the project's ParallelUnits
// (parallel_units.h); GrainFor turns a tile's flops into units per chunk (a row strip
// is a chunk of its own).
using tfevo_parallel::GrainFor;
using tfevo_parallel::ParallelUnits;

// In place: the row-major lower triangle of the n x n matrix m becomes its
// Cholesky factor (the strict upper triangle is neither read nor written).
// Right-looking, kTile columns per step: ?potrf of the diagonal tile, ?trsm of
// the tiles below it (in parallel), then the trailing lower triangle minus the
// panel's outer product, one unit per row strip of tiles (in parallel, largest
// strip first): ?gemm for the strip left of its diagonal tile, ?syrk for that
// tile.  A strip is one BLAS call with a long dimension instead of one call per
// tile (fewer calls and packings); the units are fixed by n alone.
// Returns LAPACK-style info (0: success; > 0: not positive definite).
template <typename T>
int64_t TiledCholesky(OpKernelContext* ctx, const Blas<T>& blas, T* m, int64_t n) {
  const int64_t nb = (n + kTile - 1) / kTile;
  for (int64_t kb = 0; kb < nb; ++kb) {
    const int64_t k0 = kb * kTile, nk = std::min(kTile, n - k0), k1 = k0 + nk;
    T* mkk = m + k0 * n + k0;
    const int64_t info = blas.potrf(nk, mkk, n);
    if (info != 0) return k0 + info;
    // panel: tiles I below: L_IK = M_IK L_KK^{-T}, i.e. (column-major) X = M_IK^T <- U^{-T} X
    // with U = L_KK^T, the column-major upper factor ?potrf left in place.
    const int64_t below = nb - kb - 1;
    ParallelUnits(ctx, below, GrainFor(kTile * kTile * nk), [&](int64_t u) {
      const int64_t i0 = (kb + 1 + u) * kTile, ni = std::min(kTile, n - i0);
      blas.trsm('L', 'U', 'T', 'N', nk, ni, T(1), mkk, n, m + i0 * n + k0, n);
    });
    // trailing update, strip I (I = nb - 1 - u): M_I,[k1, i0) -= L_IK L_[k1, i0),K^T
    // (column-major X ((i0 - k1) x ni) = M^T -= L_[k1,i0),K L_IK^T) and M_II -= L_IK L_IK^T.
    ParallelUnits(ctx, below, 1, [&](int64_t u) {
      const int64_t i0 = (nb - 1 - u) * kTile, ni = std::min(kTile, n - i0);
      if (i0 > k1)
        blas.gemm('T', 'N', i0 - k1, ni, nk, T(-1), m + k1 * n + k0, n, m + i0 * n + k0, n, T(1), m + i0 * n + k1, n);
      blas.syrk('U', 'T', ni, nk, T(-1), m + i0 * n + k0, n, T(1), m + i0 * n + i0, n);
    });
  }
  return 0;
}

// Whether every entry of p[0, len) is finite: an exponent-bit test on the
// integer image (a loop the compiler vectorises, unlike std::isfinite).
template <typename T>
struct FloatBits;
template <>
struct FloatBits<float> {
  using U = uint32_t;
  static constexpr U kExp = 0x7f800000u;
};
template <>
struct FloatBits<double> {
  using U = uint64_t;
  static constexpr U kExp = 0x7ff0000000000000ull;
};
template <typename T>
bool AllFinite(const T* p, int64_t len) {
  using U = typename FloatBits<T>::U;
  U bad = 0;
  for (int64_t i = 0; i < len; ++i) {
    U u;
    std::memcpy(&u, p + i, sizeof(U));
    bad |= static_cast<U>((u & FloatBits<T>::kExp) == FloatBits<T>::kExp);
  }
  return bad == 0;
}

// Whether the row-major lower triangle of the n x n matrix m is finite; if not, m becomes all NaN.
template <typename T>
bool LowerFiniteOrNaN(T* m, int64_t n) {
  bool finite = true;
  for (int64_t i = 0; i < n && finite; ++i) finite = AllFinite(m + i * n, i + 1);
  if (!finite) std::fill(m, m + n * n, std::numeric_limits<T>::quiet_NaN());
  return finite;
}

template <typename T, typename I>
struct Syevd {
  // Eigen-decomposes the n x n column-major matrix `a` in place (eigenvectors
  // as columns) and writes ascending eigenvalues to `w`.  Returns LAPACK's info.
  // The workspace is the caller's (grown as needed, never shrunk): a caller that
  // keeps it saves the allocation and page faults (~8 MB at n = 1000) per call.
  // Its size is LAPACK's query answer either way, so the bits are the same.
  static I Run(void* fn, I n, T* a, T* w, std::vector<T>* work, std::vector<I>* iwork) {
    auto f = reinterpret_cast<SyevdFn<T, I>>(fn);
    const char jobz = 'V', uplo = 'U';
    I lwork = -1, liwork = -1, info = 0, iq = 0;
    T wq = 0;
    f(&jobz, &uplo, &n, a, &n, w, &wq, &lwork, &iq, &liwork, &info, 1, 1);  // workspace query
    if (info != 0) return info;
    lwork = std::max<I>(static_cast<I>(wq) + 1, 1);
    liwork = std::max<I>(iq, 1);
    if (work->size() < static_cast<size_t>(lwork)) work->resize(static_cast<size_t>(lwork));
    if (iwork->size() < static_cast<size_t>(liwork)) iwork->resize(static_cast<size_t>(liwork));
    f(&jobz, &uplo, &n, a, &n, w, work->data(), &lwork, iwork->data(), &liwork, &info, 1, 1);
    return info;
  }
};

// ---------------------------------------------------------------------------
// SplitSyevd: ?syevd's own three steps -- ?sytrd (reduction to tridiagonal form),
// ?stedc (divide and conquer on the tridiagonal matrix) and ?ormtr (the
// back-transformation of its eigenvectors by the Householder reflectors) -- with
// the last one, a third of the time at n = 1000, cut into column blocks that run
// on TensorFlow's intra-op pool (one BLAS thread each).  Why: with one BLAS
// thread (the default, see the file comment) ?syevd leaves the second core idle;
// the back-transformation is the one step whose parts are independent (each
// column of the tridiagonal problem's eigenvector matrix is transformed alone).
// With one block this is ?syevd bit for bit (same calls, same workspace sizes;
// checked against the library).  With several, OpenBLAS's float32 ?gemm rounds
// some columns differently, so the blocks are fixed by n alone (EigUnits, edges
// on multiples of 16): the bits never depend on the number of threads.  Used for
// n >= kSplitEigMin; ?syevd's rescaling of matrices with tiny or huge entries is
// not repeated here: such a matrix goes to ?syevd itself (returns kSplitDeclined).
constexpr int64_t kSplitEigMin = 257;
constexpr int64_t kSplitDeclined = -100000;

inline int64_t EigUnits(int64_t n) { return std::min<int64_t>(8, std::max<int64_t>(2, n / 500)); }
inline int64_t EigUnitStart(int64_t n, int64_t units, int64_t u) {
  return u == 0 ? 0 : (u == units ? n : std::min(n, (n * u / units + 15) / 16 * 16));
}

template <typename T, typename I>
using SytrdFn = void (*)(const char*, const I*, T*, const I*, T*, T*, T*, T*, const I*, I*, size_t);
template <typename T, typename I>
using StedcFn = void (*)(const char*, const I*, T*, T*, T*, const I*, T*, const I*, I*, const I*, I*, size_t);
template <typename T, typename I>
using OrmtrFn = void (*)(const char*, const char*, const char*, const I*, const I*, const T*, const I*, const T*, T*,
                         const I*, T*, const I*, I*, size_t, size_t, size_t);

template <typename T>
struct EigWork {
  std::vector<T> work, z, e, tau;
  std::vector<int64_t> iwork64;
  std::vector<int32_t> iwork32;
  std::vector<std::vector<T>> unit_work;
  std::vector<int64_t> unit_info;
  std::vector<int64_t>* iwork(int64_t*) { return &iwork64; }
  std::vector<int32_t>* iwork(int32_t*) { return &iwork32; }
};

inline bool SplitSyevdAvailable(const Lapack* lib, bool f) {
  return f ? (lib->ssytrd && lib->sstedc && lib->sormtr) : (lib->dsytrd && lib->dstedc && lib->dormtr);
}

// The n x n column-major matrix `a` (its upper triangle, i.e. a row-major lower
// triangle) is destroyed; ascending eigenvalues go to `w` and the eigenvectors
// (columns) to ws->z.  Returns LAPACK's info (0 = success) or kSplitDeclined.
template <typename T, typename I>
int64_t SplitSyevdI(OpKernelContext* ctx, Lapack* lib, I n, T* a, T* w, EigWork<T>* ws) {
  constexpr bool f = std::is_same<T, float>::value;
  // ?syevd's scaling test: max |a_ij| (upper triangle) within [sqrt(smlnum), sqrt(1 / smlnum)]
  const T eps = std::numeric_limits<T>::epsilon();
  const T smlnum = std::numeric_limits<T>::min() / eps;
  const T rmin = std::sqrt(smlnum), rmax = std::sqrt(T(1) / smlnum);
  T anrm = T(0);
  for (I j = 0; j < n; ++j)
    for (I i = 0; i <= j; ++i) anrm = std::max(anrm, std::abs(a[static_cast<int64_t>(j) * n + i]));
  if ((anrm > T(0) && anrm < rmin) || anrm > rmax) return kSplitDeclined;
  auto sytrd = reinterpret_cast<SytrdFn<T, I>>(f ? lib->ssytrd : lib->dsytrd);
  auto stedc = reinterpret_cast<StedcFn<T, I>>(f ? lib->sstedc : lib->dstedc);
  auto ormtr = reinterpret_cast<OrmtrFn<T, I>>(f ? lib->sormtr : lib->dormtr);
  const char up = 'U', compz = 'I', side = 'L', trans = 'N';
  const size_t nn = static_cast<size_t>(n);
  ws->e.resize(nn);
  ws->tau.resize(nn);
  ws->z.resize(nn * nn);
  std::vector<I>* iwork = ws->iwork(static_cast<I*>(nullptr));
  I info = 0, lw = -1, liw = -1, iq = 0;
  T q = 0;
  sytrd(&up, &n, a, &n, w, ws->e.data(), ws->tau.data(), &q, &lw, &info, 1);
  if (info != 0) return info;
  const I lw_trd = std::max<I>(static_cast<I>(q) + 1, 1);
  lw = -1;
  stedc(&compz, &n, w, ws->e.data(), ws->z.data(), &n, &q, &lw, &iq, &liw, &info, 1);
  if (info != 0) return info;
  const I lw_dc = std::max<I>(static_cast<I>(q) + 1, 1), liw_dc = std::max<I>(iq, 1);
  if (ws->work.size() < static_cast<size_t>(std::max(lw_trd, lw_dc)))
    ws->work.resize(static_cast<size_t>(std::max(lw_trd, lw_dc)));
  if (iwork->size() < static_cast<size_t>(liw_dc)) iwork->resize(static_cast<size_t>(liw_dc));
  I lw1 = lw_trd;
  sytrd(&up, &n, a, &n, w, ws->e.data(), ws->tau.data(), ws->work.data(), &lw1, &info, 1);
  if (info != 0) return info;
  I lw2 = lw_dc, liw2 = liw_dc;
  stedc(&compz, &n, w, ws->e.data(), ws->z.data(), &n, ws->work.data(), &lw2, iwork->data(), &liw2, &info, 1);
  if (info != 0) return info;
  const int64_t units = EigUnits(n);
  ws->unit_work.resize(static_cast<size_t>(units));
  ws->unit_info.assign(static_cast<size_t>(units), 0);
  ParallelUnits(ctx, units, 1, [&](int64_t u) {
    const int64_t j0 = EigUnitStart(n, units, u), j1 = EigUnitStart(n, units, u + 1);
    const I cols = static_cast<I>(j1 - j0);
    if (cols <= 0) return;
    T* c = ws->z.data() + j0 * static_cast<int64_t>(n);
    std::vector<T>& uw = ws->unit_work[u];
    I inf = 0, l = -1;
    T wq = 0;
    ormtr(&side, &up, &trans, &n, &cols, a, &n, ws->tau.data(), c, &n, &wq, &l, &inf, 1, 1, 1);
    if (inf == 0) {
      l = std::max<I>(static_cast<I>(wq) + 1, 1);
      if (uw.size() < static_cast<size_t>(l)) uw.resize(static_cast<size_t>(l));
      ormtr(&side, &up, &trans, &n, &cols, a, &n, ws->tau.data(), c, &n, uw.data(), &l, &inf, 1, 1, 1);
    }
    ws->unit_info[u] = inf;
  });
  for (int64_t u = 0; u < units; ++u)
    if (ws->unit_info[u] != 0) return ws->unit_info[u];
  return 0;
}

template <typename T>
int64_t SplitSyevd(OpKernelContext* ctx, Lapack* lib, int64_t n, T* a, T* w, EigWork<T>* ws) {
  SetThreads(lib, 1);
  return lib->ilp64 ? SplitSyevdI<T, int64_t>(ctx, lib, n, a, w, ws)
                    : SplitSyevdI<T, int32_t>(ctx, lib, static_cast<int32_t>(n), a, w, ws);
}

// Whether TfevoSymEig/TfevoEigenRefresh split a decomposition (SplitSyevd): one BLAS
// thread, n >= kSplitEigMin and the three routines exported.
template <typename T>
bool UseSplitSyevd(const Lapack* lib, int64_t threads, int64_t n) {
  return threads == 1 && n >= kSplitEigMin && SplitSyevdAvailable(lib, std::is_same<T, float>::value);
}

// Eigendecomposition of the n x n matrix src (its row-major lower triangle): SplitSyevd
// when `split` (?syevd for a matrix it declines), else ?syevd.  `a` is LAPACK's working
// copy; ascending eigenvalues go to w and *vecs points at the eigenvectors as the
// columns of a column-major matrix (ws->z or a).  Returns LAPACK's info.
template <typename T>
int64_t DecomposeInto(OpKernelContext* ctx, Lapack* lib, bool split, const T* src, int64_t n, T* w, EigWork<T>* ws,
                      std::vector<T>* a, const T** vecs) {
  a->assign(src, src + n * n);
  if (split) {
    const int64_t info = SplitSyevd<T>(ctx, lib, n, a->data(), w, ws);
    *vecs = ws->z.data();
    if (info != kSplitDeclined) return info;
    a->assign(src, src + n * n);
  }
  *vecs = a->data();
  void* fn = std::is_same<T, float>::value ? lib->ssyevd : lib->dsyevd;
  if (lib->ilp64) return Syevd<T, int64_t>::Run(fn, n, a->data(), w, &ws->work, &ws->iwork64);
  return Syevd<T, int32_t>::Run(fn, static_cast<int32_t>(n), a->data(), w, &ws->work, &ws->iwork32);
}

// v[r][i] = s_i * a[i * n + r] (a's column i is eigenvector i), in 32 x 32 tiles;
// s_i = -1 when the largest-|.| component of column i (first on ties) is negative.
// With ctx, the columns' signs and then the row blocks of v are shared out over
// TensorFlow's intra-op pool (pure data movement: the same bits either way);
// without (ctx = nullptr, e.g. inside a Shard of matrices), serially.
template <typename T>
void TransposeCanonical(const T* a, int64_t n, bool canonical, T* v, OpKernelContext* ctx = nullptr) {
  constexpr int64_t kTile = 32;
  const int64_t blocks = (n + kTile - 1) / kTile;
  auto run = [&](int64_t units, const auto& fn) {
    if (ctx != nullptr) ParallelUnits(ctx, units, GrainFor(kTile * n), fn);
    else for (int64_t u = 0; u < units; ++u) fn(u);
  };
  std::vector<T> sign(n, T(1));
  if (canonical) {
    run(blocks, [&](int64_t b) {
      for (int64_t i = b * kTile; i < std::min(n, (b + 1) * kTile); ++i) {
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
    });
  }
  run(blocks, [&](int64_t b) {
    const int64_t r0 = b * kTile, r1 = std::min(n, r0 + kTile);
    for (int64_t i0 = 0; i0 < n; i0 += kTile) {
      const int64_t i1 = std::min(n, i0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        T* row = v + r * n;
        for (int64_t i = i0; i < i1; ++i) row[i] = sign[i] * a[i * n + r];
      }
    }
  });
}

template <typename T>
class SymEigOp : public OpKernel {
 public:
  explicit SymEigOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string path;
    OP_REQUIRES_OK(ctx, OpenLapackAttr(ctx, &lib_, &path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threads", &threads_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("canonical_sign", &canonical_));
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
    for (int64_t b = 0; b < batch; ++b) {  // the lower triangle only: the upper one is never read
      for (int64_t i = 0; i < n; ++i) {
        OP_REQUIRES(ctx, AllFinite(xp + (b * n + i) * n, i + 1),
                    tensorflow::errors::InvalidArgument("TfevoSymEig: the input has a non-finite entry (NaN or inf) "
                                                        "in its lower triangle; self-adjoint eigen decomposition "
                                                        "needs finite matrices"));
      }
    }
    T* ep = e_t->flat<T>().data();
    T* vp = v_t->flat<T>().data();
    SetThreads(lib_, threads_);
    std::vector<int64_t> infos(batch, 0);
    const bool split = UseSplitSyevd<T>(lib_, threads_, n);
    // LAPACK overwrites its input: each matrix is decomposed in a copy, then transposed into v.
    auto one = [&](int64_t b, OpKernelContext* pool_ctx) {
      EigWork<T> ws;
      std::vector<T> a;
      const T* vecs = nullptr;
      infos[b] = DecomposeInto<T>(pool_ctx, lib_, split, xp + b * n * n, n, ep + b * n, &ws, &a, &vecs);
      if (infos[b] == 0) TransposeCanonical<T>(vecs, n, canonical_, vp + b * n * n, pool_ctx);
    };
    if (split) {
      // one matrix after another, each with its back-transformation split over the pool
      // (so a matrix gets the same bits alone or in a batch)
      for (int64_t b = 0; b < batch; ++b) one(b, ctx);
    } else if (batch == 1 || threads_ != 1) {
      for (int64_t b = 0; b < batch; ++b) one(b, nullptr);
    } else {
      auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
      const int64_t cost = std::max<int64_t>(1, 10 * n * n * n);  // ~flops of one decomposition
      tensorflow::Shard(pool->num_threads, pool->workers, batch, cost, [&](int64_t lo, int64_t hi) {
        for (int64_t b = lo; b < hi; ++b) one(b, nullptr);
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
// A single matrix with n > 128 and `threads` = 1 is factorised in 128-column
// steps (TiledCholesky: ?potrf of the diagonal tile, then the ?trsm and
// ?syrk/?gemm tiles of the step spread over TensorFlow's intra-op pool), so a
// second core helps without OpenBLAS threads; same result for any thread count.
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

// One matrix of TfevoCholesky (also the factorisation of TfevoCovarianceRefresh):
// a (n x n, row-major) <- lower Cholesky factor of src's lower triangle plus
// diag_add on the diagonal, strict upper triangle 0.  Returns false, with a all
// NaN, when src's lower triangle is not finite or the matrix is not positive
// definite.  `alone`: the only matrix of the call, so with threads = 1 and
// n > kTile it is factorised by TiledCholesky over TensorFlow's pool.
template <typename T>
bool CholeskyInto(OpKernelContext* ctx, Lapack* lib, int64_t threads, bool alone, const T* src, int64_t n,
                  T diag_add, T* a) {
  const bool tiled = alone && threads == 1 && n > kTile && Blas<T>{lib}.ok();
  auto copy_rows = [&](int64_t lo, int64_t hi) {  // copy the lower triangle, zero the strict upper one
    bool ok = true;
    for (int64_t r = lo; r < hi; ++r) {
      const T* srow = src + r * n;
      T* row = a + r * n;
      std::copy_n(srow, r + 1, row);
      ok = ok && AllFinite(srow, r + 1);
      std::fill(row + r + 1, row + n, T(0));
      if (diag_add != T(0)) row[r] += diag_add;
    }
    return ok;
  };
  bool finite = true;
  if (tiled) {  // the copy in row strips over the pool too
    const int64_t nb = (n + kTile - 1) / kTile;
    std::vector<char> strip_ok(static_cast<size_t>(nb), 1);
    ParallelUnits(ctx, nb, 1, [&](int64_t u) {
      const int64_t i0 = (nb - 1 - u) * kTile;
      strip_ok[nb - 1 - u] = copy_rows(i0, std::min(n, i0 + kTile));
    });
    finite = std::all_of(strip_ok.begin(), strip_ok.end(), [](char c) { return c != 0; });
  } else {
    finite = copy_rows(0, n);
  }
  int64_t info = 0;
  if (finite && tiled) {
    info = TiledCholesky<T>(ctx, Blas<T>{lib}, a, n);  // tiles over TensorFlow's pool
  } else if (finite) {
    void* fn = std::is_same<T, float>::value ? lib->spotrf : lib->dpotrf;
    const char uplo = 'U';
    if (lib->ilp64) {
      int64_t nn = n, inf = 0;
      reinterpret_cast<PotrfFn<T, int64_t>>(fn)(&uplo, &nn, a, &nn, &inf, 1);
      info = inf;
    } else {
      int32_t nn = static_cast<int32_t>(n), inf = 0;
      reinterpret_cast<PotrfFn<T, int32_t>>(fn)(&uplo, &nn, a, &nn, &inf, 1);
      info = inf;
    }
  }
  if (!finite || info != 0) {
    std::fill(a, a + n * n, std::numeric_limits<T>::quiet_NaN());
    return false;
  }
  return true;
}

template <typename T>
class CholeskyOp : public OpKernel {
 public:
  explicit CholeskyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string path;
    OP_REQUIRES_OK(ctx, OpenLapackAttr(ctx, &lib_, &path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threads", &threads_));
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
    SetThreads(lib_, threads_);
    auto one = [&](int64_t b) {
      CholeskyInto<T>(ctx, lib_, threads_, batch == 1, xp + b * n * n, n, T(0), lp + b * n * n);
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

// ---------------------------------------------------------------------------
// TfevoTriangular: rows times a lower triangular matrix, or solved with it, by
// BLAS ?trmm / ?trsm (the sampling y_i = A z_i and the whitening
// z_i = A^{-1} y_i of the Cholesky CMA-ES).
//
//   a  T [n, n]   lower triangular (its strict upper triangle is not read)
//   r  T [k, n]   k row vectors
//   out T [k, n]  solve = false: out_i = a r_i  (out = r a^T)
//                 solve = true:  out_i = a^{-1} r_i
//
// Layout: r read column-major is the n x k matrix whose columns are the rows,
// and a read column-major is a^T (upper), so the call is side 'L', uplo 'U',
// trans 'T' on the columns: out_c = a r_c or a^{-1} r_c, in place in out.
// Rows are split over TensorFlow's intra-op pool in fixed chunks of kChunk
// rows (one BLAS call per chunk, BLAS on 1 thread), so the chunking and hence
// every bit of the result never depend on the number of threads.
// float32 products (solve = false) on a CPU with AVX2 + FMA use the kernel in
// namespace tri_avx2 instead of ?trmm (a read in place, only r packed; see there).
REGISTER_OP("TfevoTriangular")
    .Input("a: T")
    .Input("r: T")
    .Attr("T: {float, double}")
    .Attr("lapack: string")
    .Attr("solve: bool = false")
    .Output("out: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle a, r;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &a));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &r));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(a, 0), c->Dim(a, 1), &n));
      TF_RETURN_IF_ERROR(c->Merge(n, c->Dim(r, 1), &n));
      c->set_output(0, c->Matrix(c->Dim(r, 0), n));
      return Status();
    })
    .Doc(R"doc(
Rows times (or solved with) a lower triangular matrix, by BLAS ?trmm / ?trsm.

a: [n, n] lower triangular (strict upper triangle not read).
r: [k, n] rows.
solve: false: out = r a^T (each row multiplied by a); true: out = r a^{-T} (each row solved).
)doc");

// TfevoSyrkUpdate: c_out = s c + sum_k v_k r_k r_k^T on the LOWER triangle,
// strict upper triangle 0.  If any entry of the result is not finite (non-finite
// input, overflow), the whole output is NaN, so a caller tests one entry.  With `threads` = 1 (default) and n > kTile: one
// single-threaded ?gemm of (v r)^T r per row strip of 128 rows, up to and
// including its diagonal tile (56% of a full product's flops at n = 1000),
// strips spread over TensorFlow's intra-op pool
// (see "Tiled lower-triangle kernels").  Otherwise (small n, or `threads` != 1,
// which then sets the library's thread count; 0 leaves it): rows with positive
// and negative weights go to two ?syrk calls (alpha = +1 and -1) as
// sqrt(|v_k|) r_k.
REGISTER_OP("TfevoSyrkUpdate")
    .Input("c: T")
    .Input("r: T")
    .Input("v: T")
    .Input("s: T")
    .Attr("T: {float, double}")
    .Attr("lapack: string")
    .Attr("threads: int >= 0 = 1")
    .Output("out: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle cm, r, v, s;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &cm));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &r));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &v));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 0, &s));
      DimensionHandle n, k;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(cm, 0), c->Dim(cm, 1), &n));
      TF_RETURN_IF_ERROR(c->Merge(n, c->Dim(r, 1), &n));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(r, 0), c->Dim(v, 0), &k));
      c->set_output(0, c->Matrix(n, n));
      return Status();
    })
    .Doc(R"doc(
Lower triangle of s c + r^T diag(v) r by BLAS ?syrk; strict upper triangle of the output is 0.
)doc");

// TfevoCovarianceRefresh: the refactorisation step of the Cholesky CMA-ES on the
// variables themselves -- no [n, n] tensor is allocated per call, so no fresh
// pages are touched (a new 4 MB output per call at n = 1000 cost ~1000 page
// faults, ~1.5 ms on this project's VM, whenever the allocator had returned the
// memory to the system).  With three [n, n] variables c, a and scratch:
//   1. (update = true) scratch <- lower(s c + r^T diag(v) r) exactly as
//      TfevoSyrkUpdate; if every entry is finite the buffers of c and scratch
//      are swapped (c holds the update), else c is kept (updated = false);
//   2. scratch <- the lower Cholesky factor of c exactly as TfevoCholesky; if c
//      is not positive definite, retried on c + delta_i I with
//      delta_i = eps max(max_i |c_ii|, 1e-30) 10^i, i = 0 .. tries - 1; on
//      success the buffers of a and scratch are swapped (factored = true),
//      else a is kept.
// The scratch is written in place only when no other tensor shares its buffer
// (else it gets a new one), so readers of earlier values of c or a never see a
// change.  c and a are only ever replaced, never written.
// Shapes of the in-place update ops: three variables, then r [k, n], v [k], s [] and
// `extra_scalars` more scalar inputs; two scalar bool outputs.
Status InPlaceUpdateShape(InferenceContext* c, int extra_scalars) {
  ShapeHandle h;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 2, &h));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 1, &h));
  for (int i = 5; i < 6 + extra_scalars; ++i) TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &h));
  c->set_output(0, c->Scalar());
  c->set_output(1, c->Scalar());
  return Status();
}

REGISTER_OP("TfevoCovarianceRefresh")
    .Input("c: resource")
    .Input("a: resource")
    .Input("scratch: resource")
    .Input("r: T")
    .Input("v: T")
    .Input("s: T")
    .Attr("T: {float, double}")
    .Attr("lapack: string")
    .Attr("threads: int >= 0 = 1")
    .Attr("tries: int >= 0 = 12")
    .Attr("update: bool = true")
    .Output("updated: bool")
    .Output("factored: bool")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return InPlaceUpdateShape(c, 0); })
    .Doc(R"doc(
In place on variables: c <- lower(s c + r^T diag(v) r) if finite, then a <- chol(c) (diagonal loading on failure).
)doc");

REGISTER_OP("TfevoEigenRefresh")
    .Input("c: resource")
    .Input("b: resource")
    .Input("d: resource")
    .Input("r: T")
    .Input("v: T")
    .Input("s: T")
    .Input("update: bool")
    .Input("refresh: bool")
    .Input("floor: T")
    .Attr("T: {float, double}")
    .Attr("lapack: string")
    .Attr("threads: int >= 0 = 1")
    .Output("updated: bool")
    .Output("refreshed: bool")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return InPlaceUpdateShape(c, 3); })
    .Doc(R"doc(
In place on variables: (update) c <- lower(s c + r^T diag(v) r) if finite; (refresh) b, d <- eigenbasis of c.
)doc");

namespace {

template <typename T, typename I>
using TrFn = void (*)(const char*, const char*, const char*, const char*, const I*, const I*, const T*, const T*,
                      const I*, T*, const I*, size_t, size_t, size_t, size_t);
template <typename T, typename I>
using SyrkFn = void (*)(const char*, const char*, const I*, const I*, const T*, const T*, const I*, const T*, T*,
                        const I*, size_t, size_t);


#if TFEVO_TRI_AVX2
// ---------------------------------------------------------------------------
// out_p = a z_p for the rows z_p of z (float32, AVX2 + FMA), without BLAS.
//
// Why: for the sampling y = A z of the Cholesky CMA-ES, BLAS ?trmm packs the
// triangular matrix (2 MB at n = 1000) on every call, which costs as much as
// the product itself when there are few rows (P = 24).  Here a is read in
// place and the rows of z are packed instead (k x n, small), transposed into
// tiles of Q columns, zt[t][j][c] = z[t Q + c][j] (zero past row k), and the
// product is computed transposed like a GEMM micro-kernel:
// ot[t][i][:] = sum_{j <= i} a[i][j] zt[t][j][:] for a block of R rows of a
// (entries broadcast, only j <= i read) times the Q / 8 vectors of a tile:
// 12 accumulators, no horizontal sums.  Two shapes: R = 4 x Q = 24 when
// k <= 24 (CholeskyCMAES's default P at n = 1000 is one tile), R = 6 x Q = 16
// otherwise (fewer loads per FMA).  The j range is cut in chunks; a work unit
// runs a group of row blocks chunk by chunk and, per chunk, every tile, so the
// group's chunk of a is read from memory once and reused from cache for all
// tiles (partial sums kept in ot).  Each output entry is one sum over
// j = 0..i in ascending order (one FMA chain in its lane) whatever the shape,
// so the bits never depend on the number of threads, the shape, the chunking,
// or the other rows of z.  (Against the previous kernel -- dot products of
// rows, horizontal sums -- on this project's CPU, one thread: 1.7x faster for
// 24 rows, 1.5x for 256.)
namespace tri_avx2 {

template <int64_t Q, int64_t R, int64_t J, int64_t G>
struct Shape {
  static constexpr int64_t kQ = Q;      // columns of a zt tile (Q / 8 vectors)
  static constexpr int64_t kRows = R;   // rows of a per block
  static constexpr int64_t kJ = J;      // j per chunk (a multiple of kRows)
  static constexpr int64_t kGroup = G;  // row blocks per group (half a work unit)
};
using Few = Shape<24, 4, 124, 6>;   // k <= 24: 4 rows x 3 vectors
using Many = Shape<16, 6, 126, 4>;  // k > 24: 6 rows x 2 vectors

// One row block (rows i0 .. i0 + MA - 1) over j in [j0, jm), all j < i0: the partial
// sums in ot continue with a[i0 + r][j] zt[j][:].  (Fixed trip counts, so the compiler
// keeps the accumulators in registers.)
template <int64_t Q, int MA, int NV>
inline void BlockMain(const float* a, int64_t n, int64_t i0, const float* __restrict zt, float* __restrict ot,
                      int64_t j0, int64_t jm) {
  __m256 acc[MA][NV];
#pragma GCC unroll 6
  for (int r = 0; r < MA; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v)
      acc[r][v] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(ot + (i0 + r) * Q + 8 * v);
  const float* ar[MA];
#pragma GCC unroll 6
  for (int r = 0; r < MA; ++r) ar[r] = a + (i0 + r) * n;
  for (int64_t j = j0; j < jm; ++j) {
    const float* zj = zt + j * Q;
    __m256 zv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) zv[v] = _mm256_loadu_ps(zj + 8 * v);
    // keep three vectors of z in registers (12 accumulators + 3 + 1 broadcast = all 16):
    // without this GCC reloads them as memory operands of every FMA (16 loads per 12 FMAs)
    if constexpr (NV == 3) __asm__("" : "+x"(zv[0]), "+x"(zv[1]), "+x"(zv[2]));
#pragma GCC unroll 6
    for (int r = 0; r < MA; ++r) {
      const __m256 av = _mm256_broadcast_ss(ar[r] + j);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, zv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MA; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(ot + (i0 + r) * Q + 8 * v, acc[r][v]);
}

// The diagonal triangle of the block: j = i0 + d, rows r >= d (after BlockMain's j < i0).
template <int64_t Q, int MA, int NV>
inline void BlockDiag(const float* a, int64_t n, int64_t i0, const float* __restrict zt, float* __restrict ot) {
  for (int d = 0; d < MA; ++d) {
    const float* zj = zt + (i0 + d) * Q;
    for (int r = d; r < MA; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + (i0 + r) * n + i0 + d);
      float* o = ot + (i0 + r) * Q;
      for (int v = 0; v < NV; ++v)
        _mm256_storeu_ps(o + 8 * v, _mm256_fmadd_ps(av, _mm256_loadu_ps(zj + 8 * v), _mm256_loadu_ps(o + 8 * v)));
    }
  }
}

template <int64_t Q, int MA, int NV>
inline void Block(const float* a, int64_t n, int64_t i0, const float* zt, float* ot, int64_t j0, int64_t j1) {
  BlockMain<Q, MA, NV>(a, n, i0, zt, ot, j0, std::min(j1, i0));  // j < i0: every row of the block takes it
  if (i0 >= j0 && i0 < j1) BlockDiag<Q, MA, NV>(a, n, i0, zt, ot);
}

// The block at row i0 (fewer than R rows at the end of a).
template <int64_t Q, int R, int NV>
inline void BlockAny(const float* a, int64_t n, int64_t i0, const float* zt, float* ot, int64_t j0, int64_t j1) {
  switch (std::min<int64_t>(R, n - i0)) {
    case 6: if constexpr (R >= 6) Block<Q, 6, NV>(a, n, i0, zt, ot, j0, j1); break;
    case 5: if constexpr (R >= 5) Block<Q, 5, NV>(a, n, i0, zt, ot, j0, j1); break;
    case 4: Block<Q, 4, NV>(a, n, i0, zt, ot, j0, j1); break;
    case 3: Block<Q, 3, NV>(a, n, i0, zt, ot, j0, j1); break;
    case 2: Block<Q, 2, NV>(a, n, i0, zt, ot, j0, j1); break;
    default: Block<Q, 1, NV>(a, n, i0, zt, ot, j0, j1); break;
  }
}

// out [k, n] = z [k, n] a^T.  Work unit: a pair of groups of row blocks (g and
// ng - 1 - g: equal work per unit), each group j chunk by chunk, every zt tile per chunk
// (the group's chunk of a, kGroup kRows rows x kJ, stays in cache across the tiles).
template <typename S>
inline void Product(tensorflow::OpKernelContext* ctx, const float* a, int64_t n, const float* z, int64_t k, float* out,
                    bool parallel) {
  constexpr int64_t Q = S::kQ, R = S::kRows;
  const int64_t tiles = (k + Q - 1) / Q;
  std::vector<float> zt(static_cast<size_t>(tiles * n * Q), 0.0f), ot(static_cast<size_t>(tiles * n * Q));
  for (int64_t t = 0; t < tiles; ++t) {  // pack (transpose) z, writing zt in order
    const int64_t cols = std::min(Q, k - t * Q);
    const float* src = z + t * Q * n;
    float* dst = zt.data() + t * n * Q;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < cols; ++c) dst[j * Q + c] = src[c * n + j];
  }
  const int64_t nb = (n + R - 1) / R, ng = (nb + S::kGroup - 1) / S::kGroup, pairs = (ng + 1) / 2;
  auto group = [&](int64_t g) {
    const int64_t b0 = g * S::kGroup, b1 = std::min(nb, b0 + S::kGroup);
    const int64_t last = std::min(n, R * b1);  // the group's rows end here: j < last
    for (int64_t j0 = 0; j0 < last; j0 += S::kJ) {
      const int64_t j1 = std::min(j0 + S::kJ, last);
      for (int64_t t = 0; t < tiles; ++t) {
        const float* ztt = zt.data() + t * n * Q;
        float* ott = ot.data() + t * n * Q;
        const int64_t nv = (std::min(Q, k - t * Q) + 7) / 8;  // vectors holding rows of z (the last tile may hold fewer)
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t i0 = R * b;
          if (j0 > i0) continue;  // the block's rows end before this chunk (j0, i0: multiples of R)
          if (nv >= 3) {
            if constexpr (Q >= 24) BlockAny<Q, R, 3>(a, n, i0, ztt, ott, j0, j1);
          } else if (nv == 2) {
            BlockAny<Q, R, 2>(a, n, i0, ztt, ott, j0, j1);
          } else {
            BlockAny<Q, R, 1>(a, n, i0, ztt, ott, j0, j1);
          }
        }
      }
    }
  };
  auto unit = [&](int64_t u) {
    group(u);
    if (ng - 1 - u != u) group(ng - 1 - u);
  };
  if (parallel) {
    ParallelUnits(ctx, pairs, 1, unit);
  } else {
    for (int64_t u = 0; u < pairs; ++u) unit(u);
  }
  for (int64_t t = 0; t < tiles; ++t) {  // unpack (transpose back), reading ot in order
    const int64_t cols = std::min(Q, k - t * Q);
    const float* src = ot.data() + t * n * Q;
    float* dst = out + t * Q * n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) dst[c * n + i] = src[i * Q + c];
  }
}

}  // namespace tri_avx2
#endif  // TFEVO_TRI_AVX2

template <typename T>
class TriangularOp : public OpKernel {
 public:
  explicit TriangularOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string path;
    OP_REQUIRES_OK(ctx, OpenLapackAttr(ctx, &lib_, &path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("solve", &solve_));
    const bool f = std::is_same<T, float>::value;
    fn_ = solve_ ? (f ? lib_->strsm : lib_->dtrsm) : (f ? lib_->strmm : lib_->dtrmm);
    OP_REQUIRES(ctx, fn_ != nullptr,
                tensorflow::errors::NotFound("TfevoTriangular: ", path, " exports no ?trmm/?trsm next to its ?syevd"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& r = ctx->input(1);
    OP_REQUIRES(ctx, a.dims() == 2 && a.dim_size(0) == a.dim_size(1) && r.dims() == 2 && r.dim_size(1) == a.dim_size(0),
                tensorflow::errors::InvalidArgument("TfevoTriangular: need a [n, n] and r [k, n], got ",
                                                    a.shape().DebugString(), " and ", r.shape().DebugString()));
    const int64_t n = a.dim_size(0), k = r.dim_size(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, r.shape(), &out));
    if (n == 0 || k == 0) return;
#if TFEVO_TRI_AVX2
    if (std::is_same<T, float>::value && !solve_) {  // own kernel (see tri_avx2), no BLAS call
      const float* ap = reinterpret_cast<const float*>(a.flat<T>().data());
      const float* zp = reinterpret_cast<const float*>(r.flat<T>().data());
      float* op = reinterpret_cast<float*>(out->flat<T>().data());
      // small products (< 2^22 multiply-adds) run on the calling thread
      const bool parallel = k * n * n / 2 >= (int64_t{1} << 22);
      if (k <= tri_avx2::Few::kQ) tri_avx2::Product<tri_avx2::Few>(ctx, ap, n, zp, k, op, parallel);
      else tri_avx2::Product<tri_avx2::Many>(ctx, ap, n, zp, k, op, parallel);
      return;
    }
#endif
    std::copy_n(r.flat<T>().data(), k * n, out->flat<T>().data());
    SetOneThread(lib_);
    const T* ap = a.flat<T>().data();
    T* op = out->flat<T>().data();
    const int64_t chunks = (k + kChunk - 1) / kChunk;
    auto run = [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const int64_t r0 = c * kChunk, m = std::min(k, r0 + kChunk) - r0;
        Call(ap, n, op + r0 * n, m);
      }
    };
    if (chunks == 1) {
      run(0, 1);
    } else {
      auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
      tensorflow::Shard(pool->num_threads, pool->workers, chunks, kChunk * n * n, run);
    }
  }

 private:
  static constexpr int64_t kChunk = 64;

  void Call(const T* a, int64_t n, T* b, int64_t cols) const {
    const char side = 'L', uplo = 'U', trans = 'T', diag = 'N';
    const T one = T(1);
    if (lib_->ilp64) {
      const int64_t nn = n, cc = cols;
      reinterpret_cast<TrFn<T, int64_t>>(fn_)(&side, &uplo, &trans, &diag, &nn, &cc, &one, a, &nn, b, &nn, 1, 1, 1, 1);
    } else {
      const int32_t nn = static_cast<int32_t>(n), cc = static_cast<int32_t>(cols);
      reinterpret_cast<TrFn<T, int32_t>>(fn_)(&side, &uplo, &trans, &diag, &nn, &cc, &one, a, &nn, b, &nn, 1, 1, 1, 1);
    }
  }

  Lapack* lib_ = nullptr;
  void* fn_ = nullptr;
  bool solve_ = false;
};

template <typename T>
void SyrkCall(Lapack* lib, int64_t n, int64_t k, T alpha, const T* a, T beta, T* c) {
  if (k == 0) return;
  void* fn = std::is_same<T, float>::value ? lib->ssyrk : lib->dsyrk;
  const char uplo = 'U', trans = 'N';
  if (lib->ilp64) {
    const int64_t nn = n, kk = k;
    reinterpret_cast<SyrkFn<T, int64_t>>(fn)(&uplo, &trans, &nn, &kk, &alpha, a, &nn, &beta, c, &nn, 1, 1);
  } else {
    const int32_t nn = static_cast<int32_t>(n), kk = static_cast<int32_t>(k);
    reinterpret_cast<SyrkFn<T, int32_t>>(fn)(&uplo, &trans, &nn, &kk, &alpha, a, &nn, &beta, c, &nn, 1, 1);
  }
}

// The body of TfevoSyrkUpdate (also the update step of TfevoCovarianceRefresh):
// op (n x n, row-major) <- lower triangle of scale cp + rp^T diag(vp) rp (rp: k x n),
// strict upper triangle 0, reading only cp's lower triangle.  Returns whether
// every entry is finite; if not, op is all NaN.
template <typename T>
bool SyrkUpdateInto(OpKernelContext* ctx, Lapack* lib, int64_t threads, const T* cp, const T* rp, const T* vp,
                    T scale, int64_t n, int64_t k, T* op) {
  if (n == 0) return true;
  auto copy_rows = [&](int64_t lo, int64_t hi) {  // lower triangle of c (as is: beta scales it), upper 0
    for (int64_t i = lo; i < hi; ++i) {
      std::copy_n(cp + i * n, i + 1, op + i * n);
      std::fill(op + i * n + i + 1, op + (i + 1) * n, T(0));
    }
  };
  const Blas<T> blas{lib};
  if (threads == 1 && k > 0 && n > kTile && blas.ok()) {
    // Tiled: out_IJ += (v r)_I^T r_J by one single-threaded ?gemm per lower tile, tiles
    // over TensorFlow's pool (a NaN/inf weight or row spreads to the output as in ?syrk).
    std::vector<T> rv(static_cast<size_t>(k * n));
    for (int64_t t = 0; t < k; ++t)
      for (int64_t j = 0; j < n; ++j) rv[t * n + j] = vp[t] * rp[t * n + j];
    SetOneThread(lib);
    const int64_t nb = (n + kTile - 1) / kTile;
    std::vector<char> strip_ok(static_cast<size_t>(nb), 1);
    // unit u: row strip I = nb - 1 - u (largest first): its rows of c copied in, one ?gemm
    // over its tiles up to and including the diagonal one (whose strict upper triangle is
    // then zeroed again), and the strip's finiteness -- all while the strip is in cache.
    ParallelUnits(ctx, nb, 1, [&](int64_t u) {
      const int64_t i0 = (nb - 1 - u) * kTile, ni = std::min(kTile, n - i0), w = i0 + ni;
      copy_rows(i0, w);
      // column-major X (w x ni) = out_I,[0,w)^T <- s X + r_[0,w)^T (v r)_I
      blas.gemm('N', 'T', w, ni, k, T(1), rp, n, rv.data() + i0, n, scale, op + i0 * n, n);
      bool ok = true;
      for (int64_t i = i0; i < i0 + ni; ++i) {
        std::fill(op + i * n + i + 1, op + i * n + w, T(0));
        ok = ok && AllFinite(op + i * n, i + 1);
      }
      strip_ok[nb - 1 - u] = ok;
    });
    if (std::all_of(strip_ok.begin(), strip_ok.end(), [](char c) { return c != 0; })) return true;
    std::fill(op, op + n * n, std::numeric_limits<T>::quiet_NaN());
    return false;
  }
  copy_rows(0, n);
  // sqrt(|v_k|) r_k, grouped by the sign of v_k (zero weights dropped)
  std::vector<T> pos, neg;
  pos.reserve(k * n);
  int64_t kp = 0, kn = 0;
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<T>& dst = pass == 0 ? pos : neg;
    for (int64_t i = 0; i < k; ++i) {
      const T w = vp[i];
      if (!(pass == 0 ? w > T(0) : w < T(0))) {
        if (!std::isfinite(w)) {  // keep NaN/inf visible in the output
          std::fill(op, op + n * n, std::numeric_limits<T>::quiet_NaN());
          return false;
        }
        continue;
      }
      const T sw = std::sqrt(std::abs(w));
      for (int64_t j = 0; j < n; ++j) dst.push_back(sw * rp[i * n + j]);
      (pass == 0 ? kp : kn) += 1;
    }
  }
  SetThreads(lib, threads);
  // column-major view: rows are the columns of an n x k matrix (trans 'N'); out's
  // lower triangle (row-major) is the upper one column-major: uplo 'U'.
  SyrkCall<T>(lib, n, kp, T(1), pos.data(), scale, op);
  SyrkCall<T>(lib, n, kn, T(-1), neg.data(), kp > 0 ? T(1) : scale, op);
  if (kp == 0 && kn == 0 && scale != T(1)) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) op[i * n + j] *= scale;
  }
  return LowerFiniteOrNaN(op, n);
}

// The constructor part of the ops built on ?syrk updates: the `lapack` and `threads`
// attrs, and a clear error when the library has no ?syrk of this dtype.
template <typename T>
Status OpenSyrkLapack(OpKernelConstruction* ctx, const char* op, Lapack** lib, int64_t* threads) {
  std::string path;
  TF_RETURN_IF_ERROR(OpenLapackAttr(ctx, lib, &path));
  TF_RETURN_IF_ERROR(ctx->GetAttr("threads", threads));
  if ((std::is_same<T, float>::value ? (*lib)->ssyrk : (*lib)->dsyrk) == nullptr)
    return tensorflow::errors::NotFound(op, ": ", path, " exports no ?syrk next to its ?syevd");
  return Status();
}

template <typename T>
class SyrkUpdateOp : public OpKernel {
 public:
  explicit SyrkUpdateOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, OpenSyrkLapack<T>(ctx, "TfevoSyrkUpdate", &lib_, &threads_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& c = ctx->input(0);
    const Tensor& r = ctx->input(1);
    const Tensor& v = ctx->input(2);
    const Tensor& s = ctx->input(3);
    OP_REQUIRES(ctx, c.dims() == 2 && c.dim_size(0) == c.dim_size(1) && r.dims() == 2 && r.dim_size(1) == c.dim_size(0) &&
                     v.dims() == 1 && v.dim_size(0) == r.dim_size(0) && s.dims() == 0,
                tensorflow::errors::InvalidArgument("TfevoSyrkUpdate: need c [n, n], r [k, n], v [k], s [], got ",
                                                    c.shape().DebugString(), ", ", r.shape().DebugString(), ", ",
                                                    v.shape().DebugString(), ", ", s.shape().DebugString()));
    const int64_t n = c.dim_size(0), k = r.dim_size(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, c.shape(), &out));
    SyrkUpdateInto<T>(ctx, lib_, threads_, c.flat<T>().data(), r.flat<T>().data(), v.flat<T>().data(),
                      s.scalar<T>()(), n, k, out->flat<T>().data());
  }

 private:
  Lapack* lib_ = nullptr;
  int64_t threads_ = 1;
};

// TfevoCovarianceRefresh (see REGISTER_OP): C <- lower(s C + r^T diag(v) r), then
// A <- chol(C) with diagonal loading on failure, on the variables' own buffers.
template <typename T>
class CovarianceRefreshOp : public OpKernel {
 public:
  explicit CovarianceRefreshOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string path;
    OP_REQUIRES_OK(ctx, OpenLapackAttr(ctx, &lib_, &path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threads", &threads_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tries", &tries_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("update", &update_));
    const bool f = std::is_same<T, float>::value;
    OP_REQUIRES(ctx, (f ? lib_->ssyrk : lib_->dsyrk) != nullptr && (f ? lib_->spotrf : lib_->dpotrf) != nullptr,
                tensorflow::errors::NotFound("TfevoCovarianceRefresh: ", path,
                                             " exports no ?syrk/?potrf next to its ?syevd"));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<tensorflow::Var> vc, va, vs;
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), &vc));
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 1), &va));
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 2), &vs));
    OP_REQUIRES(ctx, vc.get() != va.get() && vc.get() != vs.get() && va.get() != vs.get(),
                tensorflow::errors::InvalidArgument("TfevoCovarianceRefresh: c, a and scratch must be three "
                                                    "different variables"));
    const Tensor& r = ctx->input(3);
    const Tensor& v = ctx->input(4);
    const Tensor& s = ctx->input(5);
    tfevo_vars::VarLocks locks({vc.get(), va.get(), vs.get()});
    Tensor* ct = vc->tensor();
    Tensor* at = va->tensor();
    Tensor* st = vs->tensor();
    const auto dt = tensorflow::DataTypeToEnum<T>::value;
    OP_REQUIRES(ctx, vc->is_initialized && va->is_initialized && ct->dtype() == dt && at->dtype() == dt &&
                     ct->dims() == 2 && ct->dim_size(0) == ct->dim_size(1) && at->shape() == ct->shape(),
                tensorflow::errors::InvalidArgument("TfevoCovarianceRefresh: c and a must be initialised [n, n] ",
                                                    tensorflow::DataTypeString(dt), " variables, got ",
                                                    ct->shape().DebugString(), " and ", at->shape().DebugString()));
    const int64_t n = ct->dim_size(0);
    OP_REQUIRES(ctx, r.dims() == 2 && r.dim_size(1) == n && v.dims() == 1 && v.dim_size(0) == r.dim_size(0) &&
                     s.dims() == 0,
                tensorflow::errors::InvalidArgument("TfevoCovarianceRefresh: need r [k, n], v [k], s [] with n = ", n,
                                                    ", got ", r.shape().DebugString(), ", ", v.shape().DebugString(),
                                                    ", ", s.shape().DebugString()));
    OP_REQUIRES(ctx, lib_->ilp64 || n <= INT32_MAX / 4,
                tensorflow::errors::InvalidArgument("TfevoCovarianceRefresh: n = ", n, " too large for a 32-bit LAPACK"));
    // The scratch buffer is written in place: it must be [n, n] and held by no one else
    // (after a swap it holds the previous C or A, which a reader may still share).
    auto own_scratch = [&]() -> tensorflow::Status {
      if (vs->is_initialized && st->dtype() == dt && st->shape() == ct->shape() && st->RefCountIsOne())
        return tensorflow::Status();
      Tensor fresh;
      TF_RETURN_IF_ERROR(ctx->allocate_temp(dt, ct->shape(), &fresh));
      *st = fresh;
      vs->is_initialized = true;
      return tensorflow::Status();
    };
    Tensor* updated_t = nullptr;
    Tensor* factored_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &updated_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, tensorflow::TensorShape({}), &factored_t));
    bool updated = false, factored = false;
    if (n > 0) {
      if (threads_ > 0) SetThreads(lib_, threads_);
      if (update_) {  // scratch <- the update; on success the scratch becomes C (C's old buffer the scratch)
        OP_REQUIRES_OK(ctx, own_scratch());
        updated = SyrkUpdateInto<T>(ctx, lib_, threads_, ct->flat<T>().data(), r.flat<T>().data(),
                                    v.flat<T>().data(), s.scalar<T>()(), n, r.dim_size(0), st->flat<T>().data());
        if (updated) std::swap(*ct, *st);
      }
      OP_REQUIRES_OK(ctx, own_scratch());
      const T* cp = ct->flat<T>().data();
      T* sp = st->flat<T>().data();
      factored = CholeskyInto<T>(ctx, lib_, threads_, true, cp, n, T(0), sp);
      if (!factored && tries_ > 0) {
        // retries on C + delta I, delta = eps max|C_ii| (at least eps 1e-30) times 10^i
        T big = T(0);
        for (int64_t i = 0; i < n; ++i) big = std::max(big, std::abs(cp[i * n + i]));
        const T base = std::numeric_limits<T>::epsilon() * std::max(big, T(1e-30));
        for (int64_t i = 0; i < tries_ && !factored; ++i)
          factored = CholeskyInto<T>(ctx, lib_, threads_, true, cp, n, base * std::pow(T(10), T(i)), sp);
      }
      if (factored) std::swap(*at, *st);  // A <- the new factor; A's old buffer becomes the scratch
    } else {
      updated = update_;
      factored = true;
    }
    updated_t->scalar<bool>()() = updated;
    factored_t->scalar<bool>()() = factored;
  }

 private:
  Lapack* lib_ = nullptr;
  int64_t threads_ = 1;
  int64_t tries_ = 12;
  bool update_ = true;
};

// TfevoEigenRefresh (see REGISTER_OP): the eigen CMA-ES's covariance step on the
// variables' own buffers, one call per generation:
//   update (input):  C <- lower(s C + r^T diag(v) r) by SyrkUpdateInto (the kernel of
//                    TfevoSyrkUpdate, bit for bit), committed only if every entry is
//                    finite;
//   refresh (input): if C's lower triangle is finite, ?syevd of it (as TfevoSymEig,
//                    bit for bit); if that succeeds with finite results,
//                    e <- max(e, max(floor * max(e), tiny)), B <- the canonically signed
//                    eigenvectors (columns), D <- sqrt(e).
// Why one op: the same steps as TensorFlow ops (TfevoSyrkUpdate, a select on C,
// TfevoSymEig, finiteness tests, the floor, three assignments) cost ~20 ms per
// generation more at n = 1000 (fresh 4-8 MB outputs and LAPACK workspace, each
// page-faulted in; extra passes over [n, n]; C, B copied on assignment) around a
// ~100 ms decomposition.  Here the updated C is computed into a spare buffer held by
// the kernel and swapped with C's, and ?syevd's matrix and workspace are kept by the
// kernel too.  Buffers that another tensor still shares (an earlier read of C, B or
// D) are never written: they are replaced by fresh ones, as an assignment would.
template <typename T>
class EigenRefreshOp : public OpKernel {
 public:
  explicit EigenRefreshOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, OpenSyrkLapack<T>(ctx, "TfevoEigenRefresh", &lib_, &threads_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<tensorflow::Var> vc, vb, vd;
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), &vc));
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 1), &vb));
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 2), &vd));
    OP_REQUIRES(ctx, vc.get() != vb.get() && vc.get() != vd.get() && vb.get() != vd.get(),
                tensorflow::errors::InvalidArgument("TfevoEigenRefresh: c, b and d must be three different variables"));
    const Tensor& r = ctx->input(3);
    const Tensor& v = ctx->input(4);
    const Tensor& s = ctx->input(5);
    const bool update = ctx->input(6).scalar<bool>()();
    const bool refresh = ctx->input(7).scalar<bool>()();
    const T floor_rel = ctx->input(8).scalar<T>()();
    tfevo_vars::VarLocks locks({vc.get(), vb.get(), vd.get()});
    std::lock_guard<std::mutex> own(mu_);  // the kernel's buffers
    Tensor* ct = vc->tensor();
    Tensor* bt = vb->tensor();
    Tensor* dtn = vd->tensor();
    const auto dt = tensorflow::DataTypeToEnum<T>::value;
    OP_REQUIRES(ctx, vc->is_initialized && vb->is_initialized && vd->is_initialized && ct->dtype() == dt &&
                     bt->dtype() == dt && dtn->dtype() == dt && ct->dims() == 2 && ct->dim_size(0) == ct->dim_size(1) &&
                     bt->shape() == ct->shape() && dtn->dims() == 1 && dtn->dim_size(0) == ct->dim_size(0),
                tensorflow::errors::InvalidArgument("TfevoEigenRefresh: need initialised ", tensorflow::DataTypeString(dt),
                                                    " variables c [n, n], b [n, n], d [n], got ",
                                                    ct->shape().DebugString(), ", ", bt->shape().DebugString(), ", ",
                                                    dtn->shape().DebugString()));
    const int64_t n = ct->dim_size(0);
    OP_REQUIRES(ctx, r.dims() == 2 && r.dim_size(1) == n && v.dims() == 1 && v.dim_size(0) == r.dim_size(0),
                tensorflow::errors::InvalidArgument("TfevoEigenRefresh: need r [k, n], v [k] with n = ", n, ", got ",
                                                    r.shape().DebugString(), ", ", v.shape().DebugString()));
    OP_REQUIRES(ctx, lib_->ilp64 || n <= INT32_MAX / 4,
                tensorflow::errors::InvalidArgument("TfevoEigenRefresh: n = ", n, " too large for a 32-bit LAPACK"));
    Tensor* updated_t = nullptr;
    Tensor* refreshed_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &updated_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, tensorflow::TensorShape({}), &refreshed_t));
    bool updated = false, refreshed = false;
    if (n == 0) {
      updated_t->scalar<bool>()() = update;
      refreshed_t->scalar<bool>()() = refresh;
      return;
    }
    if (threads_ > 0) SetThreads(lib_, threads_);
    if (update) {
      if (!(spare_.dtype() == dt && spare_.shape() == ct->shape() && spare_.RefCountIsOne()))
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(dt, ct->shape(), &spare_));
      updated = SyrkUpdateInto<T>(ctx, lib_, threads_, ct->flat<T>().data(), r.flat<T>().data(), v.flat<T>().data(),
                                  s.scalar<T>()(), n, r.dim_size(0), spare_.flat<T>().data());
      if (updated) std::swap(*ct, spare_);  // C <- the update; C's old buffer is the spare
    }
    if (refresh) {
      const T* cp = ct->flat<T>().data();
      bool finite = true;
      for (int64_t i = 0; i < n && finite; ++i) finite = AllFinite(cp + i * n, i + 1);
      const T* vecs = nullptr;
      if (finite) {
        // (as TfevoSymEig; LAPACK reads C's lower triangle only)
        w_.resize(static_cast<size_t>(n));
        const int64_t info =
            DecomposeInto<T>(ctx, lib_, UseSplitSyevd<T>(lib_, threads_, n), cp, n, w_.data(), &ws_, &a_, &vecs);
        refreshed = info == 0 && AllFinite(w_.data(), n) && AllFinite(vecs, n * n);
      }
      if (refreshed) {
        // e <- max(e, max(floor_rel max(e), tiny)); the eigenvalues are ascending
        const T lo = std::max(floor_rel * w_[n - 1], std::numeric_limits<T>::min());
        auto writable = [&](Tensor* t) -> tensorflow::Status {
          if (t->RefCountIsOne()) return tensorflow::Status();
          Tensor fresh;
          TF_RETURN_IF_ERROR(ctx->allocate_temp(dt, t->shape(), &fresh));
          *t = fresh;
          return tensorflow::Status();
        };
        OP_REQUIRES_OK(ctx, writable(bt));
        OP_REQUIRES_OK(ctx, writable(dtn));
        T* dp = dtn->flat<T>().data();
        for (int64_t i = 0; i < n; ++i) dp[i] = std::sqrt(std::max(w_[i], lo));
        TransposeCanonical<T>(vecs, n, true, bt->flat<T>().data(), ctx);
      }
    }
    updated_t->scalar<bool>()() = updated;
    refreshed_t->scalar<bool>()() = refreshed;
  }

 private:
  Lapack* lib_ = nullptr;
  int64_t threads_ = 1;
  std::mutex mu_;
  Tensor spare_;                 // the next C buffer (the previous one after a swap)
  std::vector<T> a_, w_;  // LAPACK's matrix and the eigenvalues
  EigWork<T> ws_;         // LAPACK's workspace
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfevoTriangular").Device(DEVICE_CPU).TypeConstraint<float>("T"), TriangularOp<float>);
REGISTER_KERNEL_BUILDER(Name("TfevoTriangular").Device(DEVICE_CPU).TypeConstraint<double>("T"), TriangularOp<double>);
REGISTER_KERNEL_BUILDER(Name("TfevoSyrkUpdate").Device(DEVICE_CPU).TypeConstraint<float>("T"), SyrkUpdateOp<float>);
REGISTER_KERNEL_BUILDER(Name("TfevoSyrkUpdate").Device(DEVICE_CPU).TypeConstraint<double>("T"), SyrkUpdateOp<double>);
REGISTER_KERNEL_BUILDER(Name("TfevoCovarianceRefresh").Device(DEVICE_CPU).TypeConstraint<float>("T"),
                        CovarianceRefreshOp<float>);
REGISTER_KERNEL_BUILDER(Name("TfevoCovarianceRefresh").Device(DEVICE_CPU).TypeConstraint<double>("T"),
                        CovarianceRefreshOp<double>);
REGISTER_KERNEL_BUILDER(Name("TfevoEigenRefresh").Device(DEVICE_CPU).TypeConstraint<float>("T"), EigenRefreshOp<float>);
REGISTER_KERNEL_BUILDER(Name("TfevoEigenRefresh").Device(DEVICE_CPU).TypeConstraint<double>("T"),
                        EigenRefreshOp<double>);

}  // namespace tfevo_sym_eig
