// TfevoSepCmaTell: one whole `tell` of the separable CMA-ES (tfevo.strategies.
// SepCMAES, float32) as a single kernel on the strategy's variables.
//
// Why: at D = 1000 the tell is ~40 O(P D) and O(D) steps.  XLA compiles them
// into ~80 small kernels whose dispatch costs more than their arithmetic on a
// CPU (0.2-0.45 ms per tell at P = 24 on this project's 2-core VM, against a
// ~0.07 ms floor for any TensorFlow call).  Here the population is read twice
// (a finiteness pass per row, then the weighted statistics of the sorted rows)
// and the O(D) updates are plain loops.
//
// The arithmetic is that of SepCMAES's pure-TensorFlow tell (the reference,
// tfevo/strategies/sep_cma_es.py with CMABase._tell_core in cma_base.py and
// update_stop_flags in cma_stop.py), step for step in float32, so the two agree to float rounding
// (tests/kernels/test_sep_cma_op.py).  The popsize-dependent constants come in
// as one float64 vector computed once in Python (`consts`: the named tuple
// tfevo.strategies.sep_cma_es.TellConstants, whose fields follow enum Const
// below) and are rounded to float32 where the reference rounds its Python
// constants.
//
// Variables are never written in place: every updated one gets a new buffer
// (as AssignVariableOp does), so tensors read from them earlier never change.
// All variables are locked, in address order, for the whole update.
//
// Threads: the two passes over the population run on the intra-op pool in
// fixed units (rows, then 256-column blocks), so results do not depend on the
// thread count.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "parallel_units.h"
#include "var_locks.h"

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// consts[i] (float64); the fields of TellConstants, in this order:
enum Const {
  kMu = 0,          // number of positive weights
  kOneMinusCs,      // 1 - c_sigma
  kPsCoef,          // sqrt(c_sigma (2 - c_sigma) mueff)
  kOneMinusCc,      // 1 - c_c
  kPcCoef,          // sqrt(c_c (2 - c_c) mueff)
  kHsigLimit,       // (1.4 + 2 / (n + 1)) chi_n
  kC1,              // c1
  kCmu,             // cmu
  kCc,              // c_c
  kTwoMinusCc,      // 2 - c_c
  kCmuWsum,         // cmu * sum(weights)
  kCsOverDs,        // c_sigma / d_sigma
  kChiN,            // E||N(0, I)||
  kTolfun,          // tolfun
  kTolxAbs,         // tolx (absolute, as pycma)
  kUpLimit,         // 1e20 * sigma_init (tolupsigma)
  kHistLen,         // length of the best-fitness history (tolfun, tolfunhist)
  kTolfunWindow,    // generations of the tolfun window
  kStagWindow,      // generations of the stagnation window
  kActive,          // 1: negative weights rescaled (active CMA)
  kFacUpLimit,      // TOL_FAC_UP_X * the run's initial sigma (tolfacupx)
  kStagSamples,     // length of the sampled best/median histories of tolstagnation
  kStagMinIter,     // n (5 + 100 / lambda): tolstagnation only after more iterations
  kXStagDelta,      // tolxstagnation: delta, offset, fraction (cma_stop.TOL_X_STAGNATION)
  kXStagOffset,
  kXStagFrac,
  kNumConsts
};

REGISTER_OP("TfevoSepCmaTell")
    .Input("x: float")
    .Input("fitness: float")
    .Input("weights: float")
    .Input("consts: double")
    .Input("mean: resource")
    .Input("sigma: resource")
    .Input("p_sigma: resource")
    .Input("p_c: resource")
    .Input("c_diag: resource")
    .Input("generation: resource")
    .Input("restart_generation: resource")
    .Input("best_params: resource")
    .Input("best_fitness: resource")
    .Input("best_f_hist: resource")
    .Input("stag_best_hist: resource")
    .Input("stag_median_hist: resource")
    .Input("run_best_f: resource")
    .Input("xstag_mean: resource")
    .Input("stop_counters: resource")
    .Input("stop_flags: resource")
    .Output("kept: bool")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, f, w, k;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &f));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &k));
      c->set_output(0, c->Scalar());
      return Status();
    })
    .Doc(R"doc(
One tell of the separable CMA-ES (float32) on its variables; kept = whether mean, paths and sigma were updated.
)doc");

namespace {

constexpr int kNumVars = 16;
// stop_counters entries (cma_stop.RUN_BEST_EVAL, XSTAG_SINCE, STAG_MEDIANS, FLAT_RUN)
enum Counter { kRunBestEval = 0, kXStagSince, kStagMedians, kFlatRun, kNumCounters };
constexpr int64_t kStagEvery = 5, kStagMaxSamples = 20000;  // cma_stop.STAG_SAMPLE_EVERY, STAG_MAX_SAMPLES
constexpr int64_t kColBlock = 256;  // columns per work unit of the statistics pass

using tfevo_vars::VarLocks;

// The median of v[first, last) as tfp.stats.percentile(v, 50, interpolation="midpoint"):
// the mean of the two middle order statistics (the same one twice for odd lengths).
float Midpoint(std::vector<float>::const_iterator first, std::vector<float>::const_iterator last) {
  std::vector<float> v(first, last);
  const size_t n = v.size(), lo = (n - 1) / 2, hi = n / 2;
  std::nth_element(v.begin(), v.begin() + hi, v.end());
  const float upper = v[hi];
  const float lower = lo == hi ? upper : *std::max_element(v.begin(), v.begin() + hi);
  return 0.5f * (lower + upper);
}

// 8-float vectors (GCC/Clang vector extensions: AVX, or two SSE halves): the
// O(D) loops below vectorise without -ffast-math, with partial sums and maxima
// combined in a fixed order (results do not depend on the thread count).
typedef float V8 __attribute__((vector_size(32), aligned(4)));
typedef int32_t I8 __attribute__((vector_size(32), aligned(4)));

inline V8 Load(const float* p) { return *reinterpret_cast<const V8*>(p); }
inline float Sum8(V8 a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

// sum_j (((r_j - m_j) / sigma) * u_j)^2 over [j0, j1)
float SumSquaresScaled(const float* __restrict r, const float* __restrict m, const float* __restrict u,
                       float sigma, int64_t j0, int64_t j1) {
  V8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = j0;
  for (; j + 8 <= j1; j += 8) {
    const V8 z = ((Load(r + j) - Load(m + j)) / sigma) * Load(u + j);
    acc += z * z;
  }
  float tail = 0.0f;
  for (; j < j1; ++j) {
    const float z = ((r[j] - m[j]) / sigma) * u[j];
    tail += z * z;
  }
  return Sum8(acc) + tail;
}

float SumSquares(const float* __restrict r, int64_t n) {
  V8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) acc += Load(r + j) * Load(r + j);
  float tail = 0.0f;
  for (; j < n; ++j) tail += r[j] * r[j];
  return Sum8(acc) + tail;
}

// y = (r - m) / sigma on [j0, j1): yw += wk y (if yw), rm += wk y^2
void AccumulateRow(const float* __restrict r, const float* __restrict m, float sigma, float wk,
                   float* __restrict yw, float* __restrict rm, int64_t j0, int64_t j1) {
  if (yw != nullptr) {
    for (int64_t j = j0; j < j1; ++j) {
      const float y = (r[j] - m[j]) / sigma;
      yw[j] += wk * y;
      rm[j] += wk * (y * y);
    }
  } else {
    for (int64_t j = j0; j < j1; ++j) {
      const float y = (r[j] - m[j]) / sigma;
      rm[j] += wk * (y * y);
    }
  }
}

// Whether every entry is finite (an all-ones exponent is inf or NaN; integer test).
bool AllFinite(const float* p, int64_t n) {
  const uint32_t* u = reinterpret_cast<const uint32_t*>(p);
  uint32_t bad = 0;
  for (int64_t j = 0; j < n; ++j) bad |= static_cast<uint32_t>((u[j] & 0x7f800000u) == 0x7f800000u);
  return bad == 0;
}

// max and min of p[0, n) for finite input (NaN entries are caught by AllFinite separately).
void MinMax(const float* p, int64_t n, float* lo, float* hi) {
  const float inf = std::numeric_limits<float>::infinity();
  V8 vmax = {-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf}, vmin = -vmax;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const V8 x = Load(p + j);
    vmax = x > vmax ? x : vmax;
    vmin = x < vmin ? x : vmin;
  }
  float a = -inf, b = inf;
  for (int l = 0; l < 8; ++l) {
    a = std::max(a, vmax[l]);
    b = std::min(b, vmin[l]);
  }
  for (; j < n; ++j) {
    a = std::max(a, p[j]);
    b = std::min(b, p[j]);
  }
  *hi = a;
  *lo = b;
}

class SepCmaTellOp : public OpKernel {
 public:
  explicit SepCmaTellOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x_t = ctx->input(0);
    const Tensor& f_t = ctx->input(1);
    const Tensor& w_t = ctx->input(2);
    const Tensor& k_t = ctx->input(3);
    OP_REQUIRES(ctx, x_t.dims() == 2 && f_t.dims() == 1 && f_t.dim_size(0) == x_t.dim_size(0) &&
                         w_t.dims() == 1 && w_t.dim_size(0) == x_t.dim_size(0) && k_t.dims() == 1 &&
                         k_t.dim_size(0) == kNumConsts,
                tensorflow::errors::InvalidArgument(
                    "TfevoSepCmaTell: need x [P, D], fitness [P], weights [P], consts [", int{kNumConsts},
                    "], got ", x_t.shape().DebugString(), ", ", f_t.shape().DebugString(), ", ",
                    w_t.shape().DebugString(), ", ", k_t.shape().DebugString()));
    const int64_t P = x_t.dim_size(0), D = x_t.dim_size(1);
    OP_REQUIRES(ctx, P >= 2 && D >= 1,
                tensorflow::errors::InvalidArgument("TfevoSepCmaTell: need P >= 2 and D >= 1, got x ",
                                                    x_t.shape().DebugString()));
    const double* K = k_t.flat<double>().data();
    const int64_t mu = static_cast<int64_t>(K[kMu]);
    const int64_t H = static_cast<int64_t>(K[kHistLen]);
    const int64_t tolfun_window = static_cast<int64_t>(K[kTolfunWindow]);
    const int64_t stag_window = static_cast<int64_t>(K[kStagWindow]);
    const int64_t S = static_cast<int64_t>(K[kStagSamples]);
    OP_REQUIRES(ctx, mu >= 1 && mu <= P && H >= 1 && tolfun_window >= 1 && stag_window >= 1 && S >= 2,
                tensorflow::errors::InvalidArgument("TfevoSepCmaTell: inconsistent consts (mu ", mu, ", P ", P,
                                                    ", history ", H, ", windows ", tolfun_window, "/", stag_window,
                                                    ", samples ", S, ")"));

    tensorflow::core::RefCountPtr<tensorflow::Var> v[kNumVars];
    for (int i = 0; i < kNumVars; ++i) {
      OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 4 + i), &v[i]));
    }
    std::vector<tensorflow::Var*> raw;
    for (auto& p : v) raw.push_back(p.get());
    VarLocks locks(raw);
    // Expected dtype and shape of each variable, in input order.
    const tensorflow::DataType F = tensorflow::DT_FLOAT, I64 = tensorflow::DT_INT64, I32 = tensorflow::DT_INT32;
    const struct {
      const char* name;
      tensorflow::DataType dt;
      int64_t len;  // -1: scalar
    } spec[kNumVars] = {{"mean", F, D},          {"sigma", F, -1},         {"p_sigma", F, D},
                        {"p_c", F, D},           {"c_diag", F, D},         {"generation", I64, -1},
                        {"restart_generation", I64, -1}, {"best_params", F, D}, {"best_fitness", F, -1},
                        {"best_f_hist", F, H},   {"stag_best_hist", F, S}, {"stag_median_hist", F, S},
                        {"run_best_f", F, -1},   {"xstag_mean", F, D},     {"stop_counters", I64, kNumCounters},
                        {"stop_flags", I32, -1}};
    for (int i = 0; i < kNumVars; ++i) {
      const Tensor* t = v[i]->tensor();
      const bool shape_ok = spec[i].len < 0 ? t->dims() == 0 : (t->dims() == 1 && t->dim_size(0) == spec[i].len);
      OP_REQUIRES(ctx, v[i]->is_initialized && t->dtype() == spec[i].dt && shape_ok,
                  tensorflow::errors::InvalidArgument(
                      "TfevoSepCmaTell: variable ", spec[i].name, " must be an initialised ",
                      tensorflow::DataTypeString(spec[i].dt), " ",
                      spec[i].len < 0 ? std::string("scalar") : "[" + std::to_string(spec[i].len) + "]",
                      ", got ", tensorflow::DataTypeString(t->dtype()), " ", t->shape().DebugString()));
    }
    auto vec = [&](int i) { return v[i]->tensor()->flat<float>().data(); };
    auto scalar_f = [&](int i) { return v[i]->tensor()->scalar<float>()(); };
    auto scalar_i64 = [&](int i) { return v[i]->tensor()->scalar<int64_t>()(); };
    // A new buffer for variable i (same dtype and shape); the old one stays with its readers.
    auto fresh = [&](int i, Tensor* out) -> Status {
      return ctx->allocate_temp(v[i]->tensor()->dtype(), v[i]->tensor()->shape(), out);
    };
    auto commit = [&](int i, const Tensor& t) { *v[i]->tensor() = t; };

    const float* x = x_t.flat<float>().data();
    const float* w = w_t.flat<float>().data();
    const float* m = vec(0);
    const float sigma = scalar_f(1);
    const float* ps_old = vec(2);
    const float* pc_old = vec(3);
    const float* c = vec(4);
    const int64_t generation = scalar_i64(5), restart = scalar_i64(6);
    const float inf = std::numeric_limits<float>::infinity();

    // -- fitness: NaN, +inf and -inf -> -inf, the worst (sanitize_fitness) ---------------------
    std::vector<float> fit(P);
    {
      const float* f = f_t.flat<float>().data();
      for (int64_t i = 0; i < P; ++i)
        fit[i] = std::isfinite(f[i]) ? f[i] : -inf;
    }
    // -- best so far (from the sanitized fitness, before rows are checked) ---------------------
    {
      int64_t ib = 0;
      for (int64_t i = 1; i < P; ++i)
        if (fit[i] > fit[ib]) ib = i;
      if (fit[ib] > scalar_f(8)) {
        Tensor bp, bf;
        OP_REQUIRES_OK(ctx, fresh(7, &bp));
        OP_REQUIRES_OK(ctx, fresh(8, &bf));
        std::copy(x + ib * D, x + (ib + 1) * D, bp.flat<float>().data());
        bf.scalar<float>()() = fit[ib];
        commit(7, bp);
        commit(8, bf);
      }
    }
    // -- rows with a non-finite entry count as worst -------------------------------------------
    std::vector<char> row_ok(P);
    tfevo_parallel::ParallelUnits(ctx, P, tfevo_parallel::GrainFor(D), [&](int64_t i) {
      const uint32_t* r = reinterpret_cast<const uint32_t*>(x + i * D);
      uint32_t bad = 0;  // an all-ones exponent is inf or NaN (integer test: vectorizes)
      for (int64_t j = 0; j < D; ++j) bad |= static_cast<uint32_t>((r[j] & 0x7f800000u) == 0x7f800000u);
      row_ok[i] = bad == 0;
    });
    bool any_finite = false;
    for (int64_t i = 0; i < P; ++i) {
      if (!row_ok[i]) fit[i] = -inf;
      any_finite = any_finite || std::isfinite(fit[i]);
    }
    std::vector<int64_t> order(P);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return fit[a] > fit[b]; });
    std::vector<float> f_sorted(P);
    for (int64_t k = 0; k < P; ++k) f_sorted[k] = fit[order[k]];

    // -- weighted statistics of the sorted steps y_k = (x_order[k] - m) / sigma ----------------
    // pass A (column blocks): y_w, sum_{k < mu} w_k y_k^2, and per block the partial
    // ||C^-1/2 y_k||^2 of the negative-weight rows; pass B: their rescaled y_k^2 sum.
    const bool active = K[kActive] != 0.0;
    const int64_t blocks = (D + kColBlock - 1) / kColBlock;
    std::vector<float> y_w(D), rank_mu(D), inv_sqrt_c(D);
    {
      float* __restrict isc = inv_sqrt_c.data();
      for (int64_t j = 0; j < D; ++j) isc[j] = 1.0f / std::sqrt(c[j]);
    }
    const int64_t n_neg = active ? P - mu : 0;
    std::vector<float> sq_part(blocks * std::max<int64_t>(n_neg, 1), 0.0f);
    // (a row with a non-finite entry has y = 0: it adds nothing and is skipped)
    auto row_of = [&](int64_t k) -> const float* { return row_ok[order[k]] ? x + order[k] * D : nullptr; };
    tfevo_parallel::ParallelUnits(ctx, blocks, tfevo_parallel::GrainFor(P * kColBlock * 4), [&](int64_t b) {
      const int64_t j0 = b * kColBlock, j1 = std::min(D, j0 + kColBlock);
      for (int64_t j = j0; j < j1; ++j) {
        y_w[j] = 0.0f;
        rank_mu[j] = 0.0f;
      }
      for (int64_t k = 0; k < mu; ++k) {
        const float* r = row_of(k);
        if (r == nullptr) continue;
        AccumulateRow(r, m, sigma, w[k], y_w.data(), rank_mu.data(), j0, j1);
      }
      for (int64_t k = mu; k < P; ++k) {
        const float* r = row_of(k);
        if (r == nullptr) continue;
        if (active) {
          sq_part[b * n_neg + (k - mu)] = SumSquaresScaled(r, m, inv_sqrt_c.data(), sigma, j0, j1);
        } else {
          AccumulateRow(r, m, sigma, w[k], nullptr, rank_mu.data(), j0, j1);
        }
      }
    });
    std::vector<float> w_neg(std::max<int64_t>(n_neg, 1));
    if (active) {
      const float n_f = static_cast<float>(D);
      for (int64_t q = 0; q < n_neg; ++q) {
        float s = 0.0f;
        for (int64_t b = 0; b < blocks; ++b) s += sq_part[b * n_neg + q];
        w_neg[q] = w[mu + q] * (n_f / std::max(s, 1e-30f));
      }
      tfevo_parallel::ParallelUnits(ctx, blocks, tfevo_parallel::GrainFor(n_neg * kColBlock * 3), [&](int64_t b) {
        const int64_t j0 = b * kColBlock, j1 = std::min(D, j0 + kColBlock);
        for (int64_t q = 0; q < n_neg; ++q) {
          const float* r = row_of(mu + q);
          if (r == nullptr) continue;
          AccumulateRow(r, m, sigma, w_neg[q], nullptr, rank_mu.data(), j0, j1);
        }
      });
    }

    // -- mean, paths, step size --------------------------------------------------------------
    const float one_minus_cs = static_cast<float>(K[kOneMinusCs]), ps_coef = static_cast<float>(K[kPsCoef]);
    std::vector<float> m_new(D), ps_new(D), pc_new(D);
    {
      float* __restrict mn = m_new.data();
      float* __restrict psn = ps_new.data();
      const float* __restrict yw = y_w.data();
      const float* __restrict isc = inv_sqrt_c.data();
      for (int64_t j = 0; j < D; ++j) {
        mn[j] = m[j] + sigma * yw[j];
        psn[j] = one_minus_cs * ps_old[j] + ps_coef * (yw[j] * isc[j]);
      }
    }
    const bool m_finite = AllFinite(m_new.data(), D);
    const float ps_norm = std::sqrt(SumSquares(ps_new.data(), D));
    const float g1 = static_cast<float>(generation - restart + 1);
    const float h_sigma =
        ps_norm / std::sqrt(1.0f - std::pow(one_minus_cs, 2.0f * g1)) < static_cast<float>(K[kHsigLimit]) ? 1.0f
                                                                                                            : 0.0f;
    const float one_minus_cc = static_cast<float>(K[kOneMinusCc]), pc_coef = static_cast<float>(K[kPcCoef]);
    for (int64_t j = 0; j < D; ++j) pc_new[j] = one_minus_cc * pc_old[j] + (h_sigma * pc_coef) * y_w[j];
    const float c1 = static_cast<float>(K[kC1]), cmu = static_cast<float>(K[kCmu]);
    const float delta_h = (1.0f - h_sigma) * static_cast<float>(K[kCc]) * static_cast<float>(K[kTwoMinusCc]);
    const float decay = 1.0f + c1 * delta_h - c1 - static_cast<float>(K[kCmuWsum]);

    // -- diagonal covariance ------------------------------------------------------------------
    Tensor c_t;
    OP_REQUIRES_OK(ctx, fresh(4, &c_t));
    float* c_new = c_t.flat<float>().data();
    {
      const float* __restrict pcn = pc_new.data();
      const float* __restrict rm = rank_mu.data();
      for (int64_t j = 0; j < D; ++j) c_new[j] = decay * c[j] + c1 * (pcn[j] * pcn[j]) + cmu * rm[j];
    }
    // (a non-finite entry discards the whole update, whatever the floor)
    bool c_ok = any_finite && AllFinite(c_new, D);
    if (c_ok) {
      float c_lo, c_max;
      MinMax(c_new, D, &c_lo, &c_max);
      const float floor_c = std::max(c_max * 1e-20f, std::numeric_limits<float>::min());
      for (int64_t j = 0; j < D; ++j) c_new[j] = c_new[j] > floor_c ? c_new[j] : floor_c;
      c_ok = AllFinite(c_new, D);
    }
    if (!c_ok) std::copy(c, c + D, c_new);

    const float log_step = static_cast<float>(K[kCsOverDs]) * (ps_norm / static_cast<float>(K[kChiN]) - 1.0f);
    const float sigma_new = sigma * std::exp(std::min(log_step, 1.0f));
    const bool keep = any_finite && std::isfinite(sigma_new) && m_finite;

    Tensor m_t, s_t, ps_t, pc_t;
    OP_REQUIRES_OK(ctx, fresh(0, &m_t));
    OP_REQUIRES_OK(ctx, fresh(1, &s_t));
    OP_REQUIRES_OK(ctx, fresh(2, &ps_t));
    OP_REQUIRES_OK(ctx, fresh(3, &pc_t));
    std::copy(keep ? m_new.data() : m, (keep ? m_new.data() : m) + D, m_t.flat<float>().data());
    std::copy(keep ? ps_new.data() : ps_old, (keep ? ps_new.data() : ps_old) + D, ps_t.flat<float>().data());
    std::copy(keep ? pc_new.data() : pc_old, (keep ? pc_new.data() : pc_old) + D, pc_t.flat<float>().data());
    const float sig = keep ? sigma_new : sigma;
    s_t.scalar<float>()() = sig;
    const float* mean = m_t.flat<float>().data();
    const float* pc = pc_t.flat<float>().data();

    // -- stop criteria (as cma_stop.update_stop_flags, on the updated state) -------------------
    const int64_t g = generation - restart;
    const int64_t it = g + 1;  // pycma's countiter
    const int64_t* cnt = v[14]->tensor()->flat<int64_t>().data();
    const int64_t slot = ((g % H) + H) % H;  // floormod, as the reference
    Tensor bh_t;
    OP_REQUIRES_OK(ctx, fresh(9, &bh_t));
    float* bh = bh_t.flat<float>().data();
    std::copy(vec(9), vec(9) + H, bh);
    bh[slot] = f_sorted[0];
    const int64_t count = std::min(g + 1, H);
    bool all_f_finite = true;
    for (float f : f_sorted) all_f_finite = all_f_finite && std::isfinite(f);
    const float cur_range = all_f_finite ? f_sorted[0] - f_sorted[P - 1] : inf;
    // tolfun / tolfunhist: the range of the bests recorded so far, at most the window
    const int64_t known = std::min(count, std::min(tolfun_window, H));
    float hist_range;
    {
      float lo = inf, hi = -inf;
      int64_t i = slot;
      for (int64_t q = 0; q < known; ++q) {
        lo = std::min(lo, bh[i]);
        hi = std::max(hi, bh[i]);
        if (--i < 0) i = H - 1;
      }
      hist_range = hi - lo;
    }
    const float tolfun_lim = static_cast<float>(K[kTolfun]);
    const bool tolfun = cur_range < tolfun_lim && hist_range < tolfun_lim;
    const bool tolfunhist = known > 9 && hist_range < static_cast<float>(1e-12);
    std::vector<float> scales(D);
    for (int64_t j = 0; j < D; ++j) scales[j] = std::sqrt(c_new[j]);
    float s_max, s_min;
    MinMax(scales.data(), D, &s_min, &s_max);
    bool tolx = true;
    const float tolx_abs = static_cast<float>(K[kTolxAbs]);
    for (int64_t j = 0; j < D && tolx; ++j) tolx = sig * std::max(std::fabs(pc[j]), scales[j]) < tolx_abs;
    const float ratio = s_max / std::max(s_min, 1e-37f);
    const bool cond = ratio * ratio > 1e12f;
    // diagonal C: no noeffectaxis (pycma's CMA_diagonal); float32 state: noeffectcoord fires
    // only when no coordinate moves the mean any more
    const bool no_axis = false;
    bool no_coord = true;
    for (int64_t j = 0; j < D && no_coord; ++j) no_coord = mean[j] == mean[j] + 0.2f * sig * scales[j];
    // stagnation: sampled best and median every kStagEvery iterations (ring buffers of S)
    const float f_median = 0.5f * (f_sorted[(P - 1) / 2] + f_sorted[P / 2]);
    const int64_t k = it / kStagEvery;
    const bool sample = it % kStagEvery == 0;
    Tensor sb_t, sm_t;
    int64_t stag_medians = cnt[kStagMedians];
    if (sample) {
      OP_REQUIRES_OK(ctx, fresh(10, &sb_t));
      OP_REQUIRES_OK(ctx, fresh(11, &sm_t));
      float* sb = sb_t.flat<float>().data();
      float* sm = sm_t.flat<float>().data();
      std::copy(vec(10), vec(10) + S, sb);
      std::copy(vec(11), vec(11) + S, sm);
      const int64_t sslot = (((k - 1) % S) + S) % S;
      sb[sslot] = f_sorted[0];
      sm[sslot] = f_median;
      const int64_t n_samples = std::min(k, kStagMaxSamples);
      const int64_t l = std::max(stag_window / 10, n_samples / 10);
      stag_medians = 0;
      if (n_samples > 100 && 2 * l < n_samples && 2 * l <= S) {
        // newest l samples against the l before them: neither median better (maximised)
        auto median_of = [&](const float* h, int64_t first) {
          std::vector<float> w(l);
          for (int64_t i = 0; i < l; ++i) w[i] = h[(((k - 1 - first - i) % S) + S) % S];
          return Midpoint(w.cbegin(), w.cend());
        };
        stag_medians = median_of(sb, 0) <= median_of(sb, l) && median_of(sm, 0) <= median_of(sm, l) ? 1 : 0;
      }
    }
    const bool improved = f_sorted[0] > scalar_f(12);
    const int64_t best_eval = improved ? g * P + order[0] + 1 : cnt[kRunBestEval];
    const bool stagnation = stag_medians > 0 && 2 * (it * P - best_eval) > stag_window * P &&
                            static_cast<double>(it) > K[kStagMinIter];
    // tolxstagnation: the mean within delta * sqrt(max(1, age / t)) of the reference for more
    // than t = offset + fraction * iterations iterations
    const float itf = static_cast<float>(it);
    const float t_x = static_cast<float>(K[kXStagOffset]) + static_cast<float>(K[kXStagFrac]) * itf;
    int64_t since = cnt[kXStagSince];
    const float* xref = vec(13);
    float moved_sq;
    {
      std::vector<float> diff(D);
      for (int64_t j = 0; j < D; ++j) diff[j] = xref[j] - mean[j];
      moved_sq = SumSquares(diff.data(), D);
    }
    const float age = itf - static_cast<float>(since);
    const bool moved =
        std::sqrt(moved_sq) > static_cast<float>(K[kXStagDelta]) * std::sqrt(std::max(1.0f, age / t_x));
    if (moved) since = it;
    const bool tolxstagnation = itf - static_cast<float>(since) > t_x;
    const bool tolupsigma = sig > static_cast<float>(K[kUpLimit]) * s_max;
    // tolflatfitness: more than one generation in a row with the best equal to rank floor(0.75 P)
    const int64_t flat_run = f_sorted[0] <= f_sorted[static_cast<int64_t>(0.75 * static_cast<double>(P))]
                                 ? cnt[kFlatRun] + 1 : 0;
    const bool tolflat = flat_run > 1;  // cma_stop.TOL_FLAT_FITNESS
    bool tolfacupx = false;
    const float facup = static_cast<float>(K[kFacUpLimit]);
    for (int64_t j = 0; j < D && !tolfacupx; ++j) tolfacupx = sig * scales[j] > facup;
    const bool flags[11] = {tolfun,     tolx,    cond,      no_axis,    no_coord,      stagnation,
                            tolupsigma, tolflat, tolfacupx, tolfunhist, tolxstagnation};
    int32_t bits = 0;
    for (int i = 0; i < 11; ++i) bits += flags[i] ? (1 << i) : 0;
    Tensor rb_t, xs_t, cnt_t;
    OP_REQUIRES_OK(ctx, fresh(12, &rb_t));
    OP_REQUIRES_OK(ctx, fresh(14, &cnt_t));
    rb_t.scalar<float>()() = improved ? f_sorted[0] : scalar_f(12);
    {
      int64_t* c_out = cnt_t.flat<int64_t>().data();
      c_out[kRunBestEval] = best_eval;
      c_out[kXStagSince] = since;
      c_out[kStagMedians] = stag_medians;
      c_out[kFlatRun] = flat_run;
    }
    if (moved) {
      OP_REQUIRES_OK(ctx, fresh(13, &xs_t));
      std::copy(mean, mean + D, xs_t.flat<float>().data());
    }

    // -- common scale of C moved into sigma (SepCMAES._tell_core) ------------------------------
    float c_min_now, c_max_now;
    MinMax(c_new, D, &c_min_now, &c_max_now);
    const float s = (c_max_now < 1e-4f || c_max_now > 1e4f) ? c_max_now : 1.0f;
    if (s != 1.0f) {
      const float root = std::sqrt(s);
      for (int64_t j = 0; j < D; ++j) c_new[j] = c_new[j] / s;
      s_t.scalar<float>()() = sig * root;
      float* pcw = pc_t.flat<float>().data();
      for (int64_t j = 0; j < D; ++j) pcw[j] = pcw[j] / root;
    }

    Tensor gen_t, flags_t;
    OP_REQUIRES_OK(ctx, fresh(5, &gen_t));
    OP_REQUIRES_OK(ctx, fresh(15, &flags_t));
    gen_t.scalar<int64_t>()() = generation + 1;
    flags_t.scalar<int32_t>()() = bits;
    commit(0, m_t);
    commit(1, s_t);
    commit(2, ps_t);
    commit(3, pc_t);
    commit(4, c_t);
    commit(5, gen_t);
    commit(9, bh_t);
    if (sample) {
      commit(10, sb_t);
      commit(11, sm_t);
    }
    commit(12, rb_t);
    if (moved) commit(13, xs_t);
    commit(14, cnt_t);
    commit(15, flags_t);
    Tensor* kept_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &kept_t));
    kept_t->scalar<bool>()() = keep;
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfevoSepCmaTell").Device(tensorflow::DEVICE_CPU), SepCmaTellOp);
