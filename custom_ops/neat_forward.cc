// NEAT network inference for a whole population on the CPU:
//
//   TfevoNeatCompile        genomes -> compact per-member programs (once per generation)
//   TfevoNeatForward        feed-forward programs on a batch of inputs
//   TfevoNeatRecurrentStep  one step of recurrent programs, node values carried as state
//   TfevoNeatEvaluate       Compile + Forward fused per member (feed-forward; the programs
//                           stay in per-thread scratch, never written out)
//
// The pure-TensorFlow reference is tfevo.neat.network: transform() builds
// dense [P, N, N] matrices and node levels, forward() evaluates level by
// level, recurrent_step() updates every node from the previous values.  Here
// each member becomes a short program instead:
//
//   prog   int32 [P, N, 4]  per evaluated node k (in evaluation order):
//                           (slot, activation, aggregation, end of its edges)
//   coef   float [P, N, 2]  per evaluated node k: (bias, response)
//   src    int32 [P, C]     source slot of each incoming edge, grouped by k
//   weight float [P, C]     weight of each edge
//   count  int32 [P]        number of evaluated nodes
//
// Compilation replicates transform() decision for decision: the connection
// keys are mapped to slots as genome.conn_slots does (stable sort of the node
// keys, NaN last, lower-bound search, clamped), an edge is enabled when its
// slot is used and enabled > 0.5, duplicate (in, out) pairs are merged (their
// weights summed, as scatter_nd does), the levels are the reference's
// synchronous longest-path iteration (at most N + 1 rounds; inputs 0, other
// nodes >= 1, empty slots -1), and the evaluation order is (level, slot) for
// feed-forward genomes (slot order for recurrent ones).  A node's edges are in
// increasing source slot, so max/min/maxabs ties break as the reference's
// argmax over the dense axis.  The activation/aggregation option lists are
// resolved here: one option applies to every node; with several, a node whose
// id is not among them gets activation 0 / aggregation 0 (id -1), as
// functions.apply_activation / aggregate do.
//
// Values: node = act(bias + response * agg(w_i * x_i)) over the node's
// edges; no edge: agg = 0 (product: 1, the empty product, as neat-python); a NaN input makes
// every aggregation NaN (max/min/maxabs/median too, as the reference), and hat(NaN) is NaN.
// Sums run in source-slot order (the reference's matmul has its own order), and sigmoid/tanh/exp/... are the C library's
// float functions where TensorFlow uses Eigen's: results agree to float
// rounding (a few ulp per node), not bit for bit.  One documented difference:
// the reference's dense matmul multiplies every slot's value by a 0 weight,
// so an inf anywhere in a member's values makes all its sums NaN; the program
// only touches real edges.
//
// Value type: Forward, Evaluate and RecurrentStep take an attr T (float, the default, or
// double for NEATConfig.fitness_dtype="float64"): inputs, node values, state and outputs are T;
// the genomes and the programs' coef/weight stay float32 and are widened where they meet the
// values.  The float instantiation is the same code as before the attr existed (bit for bit);
// the double activations use double constants and tf.math.softplus's double thresholds.
//
// Members are independent, split over TensorFlow's intra-op thread pool with
// fixed per-member work: results do not depend on the thread count.  An
// optional `active` mask [P] (empty = all) skips members (their outputs are 0
// and a recurrent state is passed through unchanged), e.g. finished episodes.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "neat_bred_record.h"
#include "prefetch.h"

namespace tfevo_neat_forward {

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

// Built-in ids (tfevo.neat.functions insertion order; never reordered).
enum Act {
  kSigmoid = 0, kTanh, kSin, kGauss, kRelu, kElu, kLelu, kSelu, kSoftplus, kIdentity,
  kClamped, kInv, kLog, kExp, kAbs, kHat, kSquare, kCube, kNumAct
};
enum Agg { kSum = 0, kProduct, kMax, kMin, kMaxAbs, kMedian, kMean, kNumAgg };

REGISTER_OP("TfevoNeatCompile")
    .Input("nodes: float")
    .Input("conns: float")
    .Attr("num_inputs: int >= 0")
    .Attr("feed_forward: bool = true")
    .Attr("activations: list(int)")
    .Attr("aggregations: list(int)")
    .Output("prog: int32")
    .Output("coef: float")
    .Output("src: int32")
    .Output("weight: float")
    .Output("count: int32")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle nodes, conns;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &nodes));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 3, &conns));
      DimensionHandle P = c->Dim(nodes, 0), N = c->Dim(nodes, 1), C = c->Dim(conns, 1);
      c->set_output(0, c->MakeShape({P, N, c->MakeDim(4)}));
      c->set_output(1, c->MakeShape({P, N, c->MakeDim(2)}));
      c->set_output(2, c->MakeShape({P, C}));
      c->set_output(3, c->MakeShape({P, C}));
      c->set_output(4, c->MakeShape({P}));
      return Status();
    })
    .Doc(R"doc(
NEAT genomes -> per-member evaluation programs (see custom_ops/neat_forward.cc).

nodes: [P, N, 5] (key, bias, response, aggregation id, activation id), NaN rows empty.
conns: [P, C, 5] (in key, out key, enabled, weight, marker), NaN rows empty.
)doc");

REGISTER_OP("TfevoNeatForward")
    .Input("prog: int32")
    .Input("coef: float")
    .Input("src: int32")
    .Input("weight: float")
    .Input("count: int32")
    .Input("x: T")
    .Input("active: bool")
    .Attr("num_inputs: int >= 0")
    .Attr("num_outputs: int >= 0")
    .Attr("T: {float, double} = DT_FLOAT")
    .Output("y: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle prog, x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &prog));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(5), 2, &x));
      int64_t O;
      TF_RETURN_IF_ERROR(c->GetAttr("num_outputs", &O));
      DimensionHandle B = c->Dim(x, -2);
      c->set_output(0, c->MakeShape({c->Dim(prog, 0), B, c->MakeDim(O)}));
      return Status();
    })
    .Doc(R"doc(
Feed-forward programs on inputs x [P, B, I] (or [B, I] shared by all members) -> y [P, B, O].
active: [P] bool, or [0] for all members; inactive members get y = 0.
)doc");

REGISTER_OP("TfevoNeatEvaluate")
    .Input("nodes: float")
    .Input("conns: float")
    .Input("x: T")
    .Input("active: bool")
    .Attr("num_inputs: int >= 0")
    .Attr("num_outputs: int >= 0")
    .Attr("activations: list(int)")
    .Attr("aggregations: list(int)")
    .Attr("T: {float, double} = DT_FLOAT")
    .Output("y: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle nodes, x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &nodes));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(2), 2, &x));
      int64_t O;
      TF_RETURN_IF_ERROR(c->GetAttr("num_outputs", &O));
      c->set_output(0, c->MakeShape({c->Dim(nodes, 0), c->Dim(x, -2), c->MakeDim(O)}));
      return Status();
    })
    .Doc(R"doc(
TfevoNeatCompile (feed-forward) followed by TfevoNeatForward in one pass: each member's
program is built in per-thread scratch and run at once on its inputs, so the [P, N, .] /
[P, C] program tensors are never written or read back.  Same outputs bit for bit.
x: [P, B, I] or [B, I] (shared).  active: [P] bool, or [0] for all; inactive members get 0.
)doc");

REGISTER_OP("TfevoNeatCartPoleRollout")
    .Input("prog: int32")
    .Input("coef: float")
    .Input("src: int32")
    .Input("weight: float")
    .Input("count: int32")
    .Input("physics: double")
    .Input("constants: double")
    .Attr("num_inputs: int >= 0")
    .Attr("num_outputs: int >= 1")
    .Attr("max_steps: int >= 0")
    .Attr("max_episode_steps: int >= 0")
    .Attr("sutton_barto_reward: bool = false")
    .Output("returns: double")
    .Output("lengths: int32")
    .Output("final_obs: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle phys;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 2, &phys));
      DimensionHandle n = c->Dim(phys, 0);
      c->set_output(0, c->MakeShape({n}));
      c->set_output(1, c->MakeShape({n}));
      c->set_output(2, c->MakeShape({n, c->MakeDim(4)}));
      return Status();
    })
    .Doc(R"doc(
A whole CartPole-v1 rollout of feed-forward programs: every episode runs its network and
Gymnasium's float64 dynamics step by step until it terminates, truncates or reaches max_steps.

physics: [P * B, 4] float64 start states (member p owns rows p * B .. p * B + B - 1).
constants: float64 [10]: force_mag, polemass_length, total_mass, gravity, length, 4/3,
  masspole, tau, x_threshold, theta_threshold_radians.
returns: [P * B] float64; lengths: [P * B] int32; final_obs: [P * B, 4] float32 (the last
observation while the episode was running).
)doc");

REGISTER_OP("TfevoNeatRecurrentStep")
    .Input("prog: int32")
    .Input("coef: float")
    .Input("src: int32")
    .Input("weight: float")
    .Input("count: int32")
    .Input("state: T")
    .Input("x: T")
    .Input("active: bool")
    .Attr("num_inputs: int >= 0")
    .Attr("num_outputs: int >= 0")
    .Attr("settle_steps: int >= 0 = 1")
    .Attr("T: {float, double} = DT_FLOAT")
    .Output("new_state: T")
    .Output("y: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle state;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 3, &state));
      int64_t O;
      TF_RETURN_IF_ERROR(c->GetAttr("num_outputs", &O));
      c->set_output(0, state);
      c->set_output(1, c->MakeShape({c->Dim(state, 0), c->Dim(state, 1), c->MakeDim(O)}));
      return Status();
    })
    .Doc(R"doc(
One recurrent step: inputs set to x, every evaluated node recomputed from the previous
values settle_steps times.  state [P, B, N] -> new_state [P, B, N], y [P, B, O].
)doc");

namespace {

inline float Clip(float z, float lo, float hi) { return std::min(std::max(z, lo), hi); }

// The activations of tfevo.neat.functions (neat-python's scaled definitions).
inline float Activate(int id, float z) {
  switch (id) {
    case kSigmoid: return 1.0f / (1.0f + std::exp(-Clip(5.0f * z, -60.0f, 60.0f)));
    case kTanh: return std::tanh(Clip(2.5f * z, -60.0f, 60.0f));
    case kSin: return std::sin(Clip(5.0f * z, -60.0f, 60.0f));
    case kGauss: { float c = Clip(z, -3.4f, 3.4f); return std::exp(-5.0f * c * c); }
    case kRelu: return std::max(z, 0.0f);
    case kElu: return z > 0.0f ? z : std::expm1(std::min(z, 0.0f));
    case kLelu: return z > 0.0f ? z : 0.005f * z;
    case kSelu: {
      const float l = 1.0507009873554804934193349852946f, a = 1.6732632423543772848170429916717f;
      return z > 0.0f ? l * z : l * a * std::expm1(std::min(z, 0.0f));
    }
    case kSoftplus: {
      // tf.math.softplus's thresholds (log(float eps) + 2).
      const float x = Clip(5.0f * z, -60.0f, 60.0f);
      const float t = std::log(std::numeric_limits<float>::epsilon()) + 2.0f;
      const float sp = x > -t ? x : (x < t ? std::exp(x) : std::log1p(std::exp(x)));
      return 0.2f * sp;
    }
    case kIdentity: return z;
    case kClamped: return Clip(z, -1.0f, 1.0f);
    case kInv: return z == 0.0f ? 0.0f : 1.0f / z;
    case kLog: return std::log(std::max(z, 1e-7f));
    case kExp: return std::exp(Clip(z, -60.0f, 60.0f));
    case kAbs: return std::fabs(z);
    case kHat: return std::max(1.0f - std::fabs(z), 0.0f);  // NaN stays NaN (std::max keeps its first argument)
    case kSquare: return z * z;
    case kCube: return z * z * z;
    default: return 0.0f;  // id not among the options
  }
}

inline double Clip(double z, double lo, double hi) { return std::min(std::max(z, lo), hi); }

// The same activations in double (fitness_dtype="float64"): double constants, and
// tf.math.softplus's double thresholds (log(double eps) + 2).
inline double Activate(int id, double z) {
  switch (id) {
    case kSigmoid: return 1.0 / (1.0 + std::exp(-Clip(5.0 * z, -60.0, 60.0)));
    case kTanh: return std::tanh(Clip(2.5 * z, -60.0, 60.0));
    case kSin: return std::sin(Clip(5.0 * z, -60.0, 60.0));
    case kGauss: { double c = Clip(z, -3.4, 3.4); return std::exp(-5.0 * c * c); }
    case kRelu: return std::max(z, 0.0);
    case kElu: return z > 0.0 ? z : std::expm1(std::min(z, 0.0));
    case kLelu: return z > 0.0 ? z : 0.005 * z;
    case kSelu: {
      const double l = 1.0507009873554804934193349852946, a = 1.6732632423543772848170429916717;
      return z > 0.0 ? l * z : l * a * std::expm1(std::min(z, 0.0));
    }
    case kSoftplus: {
      const double x = Clip(5.0 * z, -60.0, 60.0);
      const double t = std::log(std::numeric_limits<double>::epsilon()) + 2.0;
      const double sp = x > -t ? x : (x < t ? std::exp(x) : std::log1p(std::exp(x)));
      return 0.2 * sp;
    }
    case kIdentity: return z;
    case kClamped: return Clip(z, -1.0, 1.0);
    case kInv: return z == 0.0 ? 0.0 : 1.0 / z;
    case kLog: return std::log(std::max(z, 1e-7));
    case kExp: return std::exp(Clip(z, -60.0, 60.0));
    case kAbs: return std::fabs(z);
    case kHat: return std::max(1.0 - std::fabs(z), 0.0);
    case kSquare: return z * z;
    case kCube: return z * z * z;
    default: return 0.0;
  }
}

// agg over w_e * v[src_e] for e in [e0, e1); without edges 0 (product: 1, as neat-python).
// max / min that keep a NaN from either side (std::max drops a NaN second argument), as
// TensorFlow's reduce_max / reduce_min in the reference do; otherwise std::max / std::min exactly.
template <typename T>
inline T MaxNaN(T s, T x) { return (s < x || std::isnan(x)) ? x : s; }
template <typename T>
inline T MinNaN(T s, T x) { return (x < s || std::isnan(x)) ? x : s; }

template <typename T>
inline T Aggregate(int id, const int32_t* src, const float* w, int e0, int e1, const T* v, T* scratch) {
  const int k = e1 - e0;
  if (k <= 0) return id == kProduct ? T(1) : T(0);
  switch (id) {
    case kSum: case kMean: {
      T s = 0;
      for (int e = e0; e < e1; ++e) s += v[src[e]] * w[e];
      return id == kSum ? s : s / static_cast<T>(k);
    }
    case kProduct: {
      T s = 1;
      for (int e = e0; e < e1; ++e) s *= v[src[e]] * w[e];
      return s;
    }
    case kMax: {
      T s = -std::numeric_limits<T>::infinity();
      for (int e = e0; e < e1; ++e) s = MaxNaN(s, v[src[e]] * w[e]);
      return s;
    }
    case kMin: {
      T s = std::numeric_limits<T>::infinity();
      for (int e = e0; e < e1; ++e) s = MinNaN(s, v[src[e]] * w[e]);
      return s;
    }
    case kMaxAbs: {  // first largest |x| in source-slot order (argmax semantics); NaN wins
      T best = v[src[e0]] * w[e0], ba = std::fabs(best);
      for (int e = e0 + 1; e < e1; ++e) {
        const T c = v[src[e]] * w[e];
        if (std::fabs(c) > ba || (std::isnan(c) && !std::isnan(best))) { best = c; ba = std::fabs(c); }
      }
      return best;
    }
    case kMedian: {
      for (int e = e0; e < e1; ++e) scratch[e - e0] = v[src[e]] * w[e];
      if (std::any_of(scratch, scratch + k, [](T a) { return std::isnan(a); }))
        return std::numeric_limits<T>::quiet_NaN();
      std::sort(scratch, scratch + k);
      return T(0.5) * (scratch[(k - 1) / 2] + scratch[k / 2]);
    }
    default: return T(0);  // id not among the options
  }
}

// Aggregate for B rows at once: values node-major (v[slot * B + b]), acc[b] out.  Per row the
// same operations in the same order as Aggregate (edges in source-slot order).
template <typename T>
inline void AggregateRows(int id, const int32_t* src, const float* w, int e0, int e1, const T* v, int64_t B,
                          T* acc, T* scratch) {
  const int k = e1 - e0;
  if (k <= 0 || id < 0 || id >= kNumAgg) {
    std::fill(acc, acc + B, k <= 0 && id == kProduct ? T(1) : T(0));
    return;
  }
  switch (id) {
    case kSum: case kMean: {
      std::fill(acc, acc + B, T(0));
      for (int e = e0; e < e1; ++e) {
        const T* vs = v + static_cast<int64_t>(src[e]) * B;
        const float we = w[e];
        for (int64_t b = 0; b < B; ++b) acc[b] += vs[b] * we;
      }
      if (id == kMean)
        for (int64_t b = 0; b < B; ++b) acc[b] = acc[b] / static_cast<T>(k);
      return;
    }
    case kProduct: {
      std::fill(acc, acc + B, T(1));
      for (int e = e0; e < e1; ++e) {
        const T* vs = v + static_cast<int64_t>(src[e]) * B;
        const float we = w[e];
        for (int64_t b = 0; b < B; ++b) acc[b] *= vs[b] * we;
      }
      return;
    }
    case kMax: case kMin: {
      const T init = id == kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
      std::fill(acc, acc + B, init);
      for (int e = e0; e < e1; ++e) {
        const T* vs = v + static_cast<int64_t>(src[e]) * B;
        const float we = w[e];
        if (id == kMax) {
          for (int64_t b = 0; b < B; ++b) acc[b] = MaxNaN(acc[b], vs[b] * we);
        } else {
          for (int64_t b = 0; b < B; ++b) acc[b] = MinNaN(acc[b], vs[b] * we);
        }
      }
      return;
    }
    default: {  // maxabs, median: row by row
      for (int64_t b = 0; b < B; ++b) {
        if (id == kMaxAbs) {
          T best = v[static_cast<int64_t>(src[e0]) * B + b] * w[e0], ba = std::fabs(best);
          for (int e = e0 + 1; e < e1; ++e) {
            const T c = v[static_cast<int64_t>(src[e]) * B + b] * w[e];
            if (std::fabs(c) > ba || (std::isnan(c) && !std::isnan(best))) { best = c; ba = std::fabs(c); }
          }
          acc[b] = best;
        } else {
          for (int e = e0; e < e1; ++e) scratch[e - e0] = v[static_cast<int64_t>(src[e]) * B + b] * w[e];
          if (std::any_of(scratch, scratch + k, [](T a) { return std::isnan(a); })) {
            acc[b] = std::numeric_limits<T>::quiet_NaN();
            continue;
          }
          std::sort(scratch, scratch + k);
          acc[b] = T(0.5) * (scratch[(k - 1) / 2] + scratch[k / 2]);
        }
      }
      return;
    }
  }
}

// Effective id: the single option for every node, else the node's id if it is an option, else -1.
inline int Resolve(float raw, const std::vector<int>& opts) {
  if (opts.size() == 1) return opts[0];
  const float f = std::isnan(raw) ? 0.0f : raw;
  // tf.cast(float -> int32) truncates toward zero; out-of-range ids match no option.
  if (!(f > -2147483648.0f && f < 2147483648.0f)) return -1;
  const int id = static_cast<int>(f);
  for (int o : opts)
    if (o == id) return id;
  return -1;
}

// Bit i set iff row i (of n <= 64 rows of 5 floats from `rows`) has a non-NaN first column.
inline uint64_t ValidRows(const float* rows, int n) {
  uint64_t bits = 0;  // branch-free: the loads do not wait on one another
  for (int i = 0; i < n; ++i) bits |= static_cast<uint64_t>(!std::isnan(rows[i * 5])) << i;
  return bits;
}

// One member's genome -> its program (what TfevoNeatCompile writes for that member), with
// per-thread scratch.  Compile() writes the program's rows 0..count-1 of pr/cf and edges
// 0..edges-1 of sp/wp, nothing else.
struct Compiler {
  struct Edge { int dst, src; float w; };
  int n, c, I;
  bool ff;
  const std::vector<int>& acts_;
  const std::vector<int>& aggs_;
  std::vector<int> korder, level, base, next, pos, ev, fill;
  std::vector<float> sk;
  std::vector<Edge> edges, grouped;

  Compiler(int64_t N, int64_t C, int64_t num_inputs, bool feed_forward, const std::vector<int>& acts,
           const std::vector<int>& aggs)
      : n(static_cast<int>(N)), c(static_cast<int>(C)), I(static_cast<int>(num_inputs)), ff(feed_forward),
        acts_(acts), aggs_(aggs), korder(n), level(n), base(n), next(n), pos(n), ev(n), fill(n + 1), sk(n),
        edges(c), grouped(c) {}

  // Returns the number of evaluated nodes; *n_edges = the number of edges written.
  // Node rows from `ns` on and connection rows from `cs` on (default: none) are known to be
  // NaN (a population the breed kernel made, neat_bred_record.h) and are not read.
  int Compile(const float* nd, const float* cn, int32_t* pr, float* cf, int32_t* sp, float* wp, int* n_edges,
              int ns = -1, int cs = -1) {
    ns = ns < 0 || ns > n ? n : ns;
    cs = cs < 0 || cs > c ? c : cs;
    // genome.conn_slots: stable argsort of the keys (NaN -> +inf), lower bound, clamped to
    // the last sorted position.  Insertion sort: slots are nearly sorted by key.
    int nvalid = 0, first_nan = -1, last_valid = -1;
    for (int i = 0; i < ns; ++i) {
      const float k = nd[i * 5];
      if (std::isnan(k)) {
        if (first_nan < 0) first_nan = i;
        continue;
      }
      last_valid = i;
      int j = nvalid++;
      while (j > 0 && sk[j - 1] > k) { sk[j] = sk[j - 1]; korder[j] = korder[j - 1]; --j; }
      sk[j] = k;
      korder[j] = i;
    }
    if (first_nan < 0 && ns < n) first_nan = ns;  // the rows not read are NaN
    auto lookup = [&](float q) {
      if (std::isnan(q)) q = -1.0f;
      // lower bound among the valid keys; the +inf (NaN) tail starts at nvalid
      const int ps = static_cast<int>(std::lower_bound(sk.begin(), sk.begin() + nvalid, q) - sk.begin());
      if (ps < nvalid) return korder[ps];
      // beyond the valid keys: the first +inf (NaN) key, i.e. the first empty slot, or the clamp
      return nvalid < n ? first_nan : korder[n - 1];
    };
    // Slots at or past nlim are empty and no edge touches them (a lookup returns a valid slot,
    // the first empty one, or the last slot when all are valid): the per-slot passes stop there.
    const int nlim = nvalid == n ? n : std::max(first_nan + 1, last_valid + 1);
    int m = 0;
    for (int e0 = 0; e0 < cs; e0 += 64) {  // rows with an in-key, 64 at a time
      for (uint64_t bits = ValidRows(cn + e0 * 5, std::min(64, cs - e0)); bits != 0; bits &= bits - 1) {
        const float* r = cn + (e0 + __builtin_ctzll(bits)) * 5;
        const float en = std::isnan(r[2]) ? 0.0f : r[2];
        if (!(en > 0.5f)) continue;
        edges[m++] = {lookup(r[1]), lookup(r[0]), r[3]};
      }
    }
    // Levels: network.compute_levels (synchronous rounds, at most N + 1).
    for (int i = 0; i < nlim; ++i) {
      base[i] = std::isnan(nd[i * 5]) ? -1 : (i < I ? 0 : 1);
      level[i] = base[i];
    }
    if (ff) {
      bool changed = true;
      for (int round = 0; changed && round <= n; ++round) {
        for (int i = 0; i < nlim; ++i) next[i] = 0;
        for (int e = 0; e < m; ++e) next[edges[e].dst] = std::max(next[edges[e].dst], level[edges[e].src] + 1);
        changed = false;
        for (int i = 0; i < nlim; ++i) {
          const int v = (base[i] != 1) ? base[i] : std::max(1, next[i]);
          changed |= (v != level[i]);
          next[i] = v;
        }
        std::swap(level, next);
      }
    }
    // Evaluated nodes: valid non-inputs, ordered by (level, slot) (insertion sort, stable).
    int cnt = 0;
    for (int i = 0; i < nlim; ++i) {
      if (base[i] != 1) continue;
      int j = cnt++;
      while (j > 0 && level[ev[j - 1]] > level[i]) { ev[j] = ev[j - 1]; --j; }
      ev[j] = i;
    }
    for (int i = 0; i < nlim; ++i) pos[i] = -1;
    for (int k = 0; k < cnt; ++k) pos[ev[k]] = k;
    // Group the edges by evaluation position (counting sort), then per node sort by
    // source slot and merge duplicate pairs (weights summed, as scatter_nd does).
    for (int k = 0; k <= cnt; ++k) fill[k] = 0;
    for (int e = 0; e < m; ++e)
      if (pos[edges[e].dst] >= 0) ++fill[pos[edges[e].dst] + 1];
    for (int k = 0; k < cnt; ++k) fill[k + 1] += fill[k];
    for (int e = 0; e < m; ++e) {
      const int k = pos[edges[e].dst];
      if (k >= 0) grouped[fill[k]++] = edges[e];
    }
    // fill[k] is now the end of node k's group; its start is fill[k - 1] (0 for k = 0).
    int out = 0, g0 = 0;
    for (int k = 0; k < cnt; ++k) {
      const int g1 = fill[k];
      const int o0 = out;
      for (int g = g0; g < g1; ++g) {  // insertion by source slot, merging equal sources
        const int s = grouped[g].src;
        int j = out;
        while (j > o0 && sp[j - 1] > s) --j;
        if (j > o0 && sp[j - 1] == s) {
          wp[j - 1] += grouped[g].w;
          continue;
        }
        for (int t = out; t > j; --t) { sp[t] = sp[t - 1]; wp[t] = wp[t - 1]; }
        sp[j] = s;
        wp[j] = grouped[g].w;
        ++out;
      }
      g0 = g1;
      const int s = ev[k];
      const float* r = nd + s * 5;
      pr[k * 4 + 0] = s;
      pr[k * 4 + 1] = Resolve(r[4], acts_);
      pr[k * 4 + 2] = Resolve(r[3], aggs_);
      pr[k * 4 + 3] = out;
      cf[k * 2 + 0] = std::isnan(r[1]) ? 0.0f : r[1];
      cf[k * 2 + 1] = std::isnan(r[2]) ? 1.0f : r[2];
    }
    *n_edges = out;
    return cnt;
  }
};

// The activation / aggregation option lists of the compile attrs (built-in ids).
Status ReadOptions(OpKernelConstruction* ctx, const char* name, std::vector<int>* acts, std::vector<int>* aggs) {
  std::vector<int64_t> a, g;
  TF_RETURN_IF_ERROR(ctx->GetAttr("activations", &a));
  TF_RETURN_IF_ERROR(ctx->GetAttr("aggregations", &g));
  if (a.empty() || g.empty())
    return tensorflow::errors::InvalidArgument(name, ": empty activation/aggregation options");
  for (int64_t v : a)
    if (v < 0 || v >= kNumAct)
      return tensorflow::errors::InvalidArgument(name, ": activation id ", v, " is not built in");
  for (int64_t v : g)
    if (v < 0 || v >= kNumAgg)
      return tensorflow::errors::InvalidArgument(name, ": aggregation id ", v, " is not built in");
  acts->assign(a.begin(), a.end());
  aggs->assign(g.begin(), g.end());
  return Status();
}

Status CheckGenomes(const Tensor& nodes_t, const Tensor& conns_t, const char* name) {
  if (!(nodes_t.dims() == 3 && nodes_t.dim_size(2) == 5))
    return tensorflow::errors::InvalidArgument(name, ": nodes must be [P, N, 5], got ",
                                               nodes_t.shape().DebugString());
  if (!(conns_t.dims() == 3 && conns_t.dim_size(2) == 5 && conns_t.dim_size(0) == nodes_t.dim_size(0)))
    return tensorflow::errors::InvalidArgument(name, ": conns must be [P, C, 5] with the nodes' P, got ",
                                               conns_t.shape().DebugString());
  if (!(nodes_t.dim_size(1) < (1 << 30) && conns_t.dim_size(1) < (1 << 30)))
    return tensorflow::errors::InvalidArgument(name, ": too many slots");
  return Status();
}

class CompileOp : public OpKernel {
 public:
  explicit CompileOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_inputs", &num_inputs_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("feed_forward", &feed_forward_));
    OP_REQUIRES_OK(ctx, ReadOptions(ctx, "TfevoNeatCompile", &acts_, &aggs_));
    record_ = tfevo_neat_record::Lookup(ctx);
  }
  ~CompileOp() override {
    if (record_ != nullptr) record_->Unref();
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& nodes_t = ctx->input(0);
    const Tensor& conns_t = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckGenomes(nodes_t, conns_t, "TfevoNeatCompile"));
    const int64_t P = nodes_t.dim_size(0), N = nodes_t.dim_size(1), C = conns_t.dim_size(1);
    Tensor *prog_t, *coef_t, *src_t, *w_t, *count_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({P, N, 4}), &prog_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({P, N, 2}), &coef_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({P, C}), &src_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({P, C}), &w_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({P}), &count_t));
    const float* nodes = nodes_t.flat<float>().data();
    const float* conns = conns_t.flat<float>().data();
    int32_t* prog = prog_t->flat<int32_t>().data();
    float* coef = coef_t->flat<float>().data();
    int32_t* srcs = src_t->flat<int32_t>().data();
    float* wts = w_t->flat<float>().data();
    int32_t* count = count_t->flat<int32_t>().data();

    const int ns = static_cast<int>(record_ != nullptr ? record_->Width(nodes_t) : N);
    const int cs = static_cast<int>(record_ != nullptr ? record_->Width(conns_t) : C);
    auto work = [&](int64_t begin, int64_t end) {
      Compiler comp(N, C, num_inputs_, feed_forward_, acts_, aggs_);
      for (int64_t p = begin; p < end; ++p) {
        int32_t* pr = prog + p * N * 4;
        float* cf = coef + p * N * 2;
        int32_t* sp = srcs + p * C;
        float* wp = wts + p * C;
        int out = 0;
        const int cnt = comp.Compile(nodes + p * N * 5, conns + p * C * 5, pr, cf, sp, wp, &out, ns, cs);
        for (int64_t k = cnt; k < N; ++k) {
          pr[k * 4 + 0] = -1; pr[k * 4 + 1] = -1; pr[k * 4 + 2] = -1; pr[k * 4 + 3] = out;
          cf[k * 2 + 0] = 0.0f; cf[k * 2 + 1] = 0.0f;
        }
        for (int64_t j = out; j < C; ++j) { sp[j] = -1; wp[j] = 0.0f; }
        count[p] = cnt;
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    const int64_t cost = 40 * (N + C) + 8 * C * 4;
    tensorflow::Shard(pool->num_threads, pool->workers, P, cost, work);
  }

 private:
  int64_t num_inputs_;
  bool feed_forward_;
  std::vector<int> acts_, aggs_;
  tfevo_neat_record::BredRecord* record_ = nullptr;
};

// Shared input checks of the program tensors.
struct Program {
  const int32_t* prog; const float* coef; const int32_t* src; const float* w; const int32_t* count;
  const bool* active;
  int64_t P, N, C;
};

Status ReadProgram(OpKernelContext* ctx, const char* name, Program* pg) {
  const Tensor& prog = ctx->input(0);
  const Tensor& coef = ctx->input(1);
  const Tensor& src = ctx->input(2);
  const Tensor& w = ctx->input(3);
  const Tensor& count = ctx->input(4);
  if (prog.dims() != 3 || prog.dim_size(2) != 4)
    return tensorflow::errors::InvalidArgument(name, ": prog must be [P, N, 4], got ", prog.shape().DebugString());
  const int64_t P = prog.dim_size(0), N = prog.dim_size(1);
  if (coef.dims() != 3 || coef.dim_size(0) != P || coef.dim_size(1) != N || coef.dim_size(2) != 2)
    return tensorflow::errors::InvalidArgument(name, ": coef must be [P, N, 2], got ", coef.shape().DebugString());
  if (src.dims() != 2 || src.dim_size(0) != P || !(w.shape() == src.shape()))
    return tensorflow::errors::InvalidArgument(name, ": src and weight must be [P, C], got ",
                                               src.shape().DebugString(), " and ", w.shape().DebugString());
  if (count.dims() != 1 || count.dim_size(0) != P)
    return tensorflow::errors::InvalidArgument(name, ": count must be [P], got ", count.shape().DebugString());
  pg->P = P; pg->N = N; pg->C = src.dim_size(1);
  pg->prog = prog.flat<int32_t>().data();
  pg->coef = coef.flat<float>().data();
  pg->src = src.flat<int32_t>().data();
  pg->w = w.flat<float>().data();
  pg->count = count.flat<int32_t>().data();
  return Status();
}

// Work of evaluating all active programs once per batch row, in rough nanoseconds; below
// kInline the kernel runs on the calling thread (waking pool threads costs more than the
// work, e.g. a control rollout's per-step call at P = 1000, and far more on a loaded machine).
constexpr int64_t kInline = 150000;

int64_t ProgramWork(const Program& pg) {
  int64_t w = 0;
  for (int64_t p = 0; p < pg.P; ++p) {
    if (pg.active != nullptr && !pg.active[p]) continue;
    const int32_t cnt = pg.count[p];
    if (cnt <= 0 || cnt > pg.N) continue;
    w += 20 + 10 * cnt + 2 * pg.prog[(p * pg.N + cnt - 1) * 4 + 3];
  }
  return w;
}

// Whether member p's program is well formed (slots and edge ranges in bounds).  Programs
// normally come from TfevoNeatCompile but may be any tensors: checked per member, in the
// parallel loop, on the data the evaluation reads anyway.
bool ValidMember(const Program& pg, int64_t p) {
  const int32_t cnt = pg.count[p];
  if (cnt < 0 || cnt > pg.N) return false;
  int32_t e0 = 0;
  for (int32_t k = 0; k < cnt; ++k) {
    const int32_t* r = pg.prog + (p * pg.N + k) * 4;
    if (r[0] < 0 || r[0] >= pg.N || r[3] < e0 || r[3] > pg.C) return false;
    for (int32_t e = e0; e < r[3]; ++e) {
      const int32_t s = pg.src[p * pg.C + e];
      if (s < 0 || s >= pg.N) return false;
    }
    e0 = r[3];
  }
  return true;
}

// Member p's program: its (slot, activation, aggregation, edge end) rows, (bias, response)
// coefficients and edge list, and one evaluation of it in (level, slot) order.
struct MemberProgram {
  const int32_t* prog; const float* coef; const int32_t* src; const float* w; int32_t count;

  // Node values: each program node aggregates from `in` and writes its activation to `out`
  // (the same array for feed-forward networks; the previous/next state for recurrent ones).
  template <typename T>
  inline void Run(const T* in, T* out, T* scratch) const {
    int e0 = 0;
    for (int32_t k = 0; k < count; ++k) {
      const int32_t* r = prog + k * 4;
      const T a = Aggregate(r[2], src, w, e0, r[3], in, scratch);
      out[r[0]] = Activate(r[1], coef[2 * k] + coef[2 * k + 1] * a);
      e0 = r[3];
    }
  }
};

inline MemberProgram Member(const Program& pg, int64_t p) {
  return {pg.prog + p * pg.N * 4, pg.coef + p * pg.N * 2, pg.src + p * pg.C, pg.w + p * pg.C, pg.count[p]};
}

Status ReadActive(OpKernelContext* ctx, int index, const char* name, Program* pg) {
  const Tensor& a = ctx->input(index);
  if (a.NumElements() == 0) {
    pg->active = nullptr;
    return Status();
  }
  if (a.dims() != 1 || a.dim_size(0) != pg->P)
    return tensorflow::errors::InvalidArgument(name, ": active must be [P] or [0], got ", a.shape().DebugString());
  pg->active = a.flat<bool>().data();
  return Status();
}

// x [P, B, I] (per member) or [B, I] (shared): pointer to member p's rows.
template <typename T>
struct Inputs {
  const T* x; int64_t B, I; bool shared;
  const T* rows(int64_t p) const { return shared ? x : x + p * B * I; }
};

template <typename T>
Status ReadInputs(const Tensor& x, int64_t P, int64_t I, const char* name, Inputs<T>* in) {
  if (x.dims() == 3 && x.dim_size(0) == P && x.dim_size(2) == I) {
    *in = {x.flat<T>().data(), x.dim_size(1), I, false};
  } else if (x.dims() == 2 && x.dim_size(1) == I) {
    *in = {x.flat<T>().data(), x.dim_size(0), I, true};
  } else {
    return tensorflow::errors::InvalidArgument(name, ": x must be [P=", P, ", B, ", I, "] or [B, ", I, "], got ",
                                               x.shape().DebugString());
  }
  return Status();
}

// Scratch of ForwardMember for N slots, C edges, B rows.
constexpr int64_t kRowsTogether = 8;  // measured: ~2.5x less per row at 32 rows, no gain at 4
template <typename T>
struct RowScratch {
  std::vector<T> v, scratch, vb, acc;
  RowScratch(int64_t N, int64_t C, int64_t B) : v(N), scratch(C + 1), vb(B >= kRowsTogether ? N * B : 0), acc(B) {}
};

// Feed-forward outputs of one member's program for its B input rows xp [B, I] -> yp [B, O].
template <typename T>
inline void ForwardMember(const MemberProgram& m, const T* xp, int64_t B, int64_t I, int64_t O, RowScratch<T>* rs,
                          T* yp) {
  if (B >= kRowsTogether) {  // node-major: each node's program read once for all rows
    T* vb = rs->vb.data();
    T* acc = rs->acc.data();
    std::fill(rs->vb.begin(), rs->vb.end(), T(0));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < I; ++i) vb[i * B + b] = xp[b * I + i];
    int e0 = 0;
    for (int32_t k = 0; k < m.count; ++k) {
      const int32_t* r = m.prog + k * 4;
      AggregateRows(r[2], m.src, m.w, e0, r[3], vb, B, acc, rs->scratch.data());
      T* out = vb + static_cast<int64_t>(r[0]) * B;
      const T bias = m.coef[2 * k], resp = m.coef[2 * k + 1];
      const int act = r[1];
      for (int64_t b = 0; b < B; ++b) out[b] = Activate(act, bias + resp * acc[b]);
      e0 = r[3];
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t o = 0; o < O; ++o) yp[b * O + o] = vb[(I + o) * B + b];
    return;
  }
  T* v = rs->v.data();
  for (int64_t b = 0; b < B; ++b) {
    std::fill(rs->v.begin(), rs->v.end(), T(0));
    std::memcpy(v, xp + b * I, I * sizeof(T));
    m.Run(v, v, rs->scratch.data());
    std::memcpy(yp + b * O, v + I, O * sizeof(T));
  }
}

template <typename T>
class ForwardOp : public OpKernel {
 public:
  explicit ForwardOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_inputs", &I_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_outputs", &O_));
  }

  void Compute(OpKernelContext* ctx) override {
    Program pg;
    OP_REQUIRES_OK(ctx, ReadProgram(ctx, "TfevoNeatForward", &pg));
    OP_REQUIRES_OK(ctx, ReadActive(ctx, 6, "TfevoNeatForward", &pg));
    OP_REQUIRES(ctx, I_ + O_ <= pg.N,
                tensorflow::errors::InvalidArgument("TfevoNeatForward: ", I_, " inputs + ", O_,
                                                    " outputs exceed the ", pg.N, " node slots"));
    Inputs<T> in;
    OP_REQUIRES_OK(ctx, ReadInputs(ctx->input(5), pg.P, I_, "TfevoNeatForward", &in));
    const int64_t P = pg.P, N = pg.N, C = pg.C, B = in.B, I = I_, O = O_;
    Tensor* y_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({P, B, O}), &y_t));
    T* y = y_t->flat<T>().data();
    std::atomic<bool> bad(false);
    auto work = [&](int64_t begin, int64_t end) {
      RowScratch<T> rs(N, C, B);
      for (int64_t p = begin; p < end; ++p) {
        T* yp = y + p * B * O;
        if (pg.active != nullptr && !pg.active[p]) {
          std::fill(yp, yp + B * O, T(0));
          continue;
        }
        if (!ValidMember(pg, p)) {
          bad = true;
          std::fill(yp, yp + B * O, T(0));
          continue;
        }
        ForwardMember(Member(pg, p), in.rows(p), B, I, O, &rs, yp);
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    const int64_t total = B * ProgramWork(pg);
    if (total < kInline) {
      work(0, P);
    } else {
      tensorflow::Shard(pool->num_threads, pool->workers, P, std::max<int64_t>(1, total / std::max<int64_t>(P, 1)),
                        work);
    }
    OP_REQUIRES(ctx, !bad.load(), tensorflow::errors::InvalidArgument("TfevoNeatForward: malformed program"));
  }

 private:
  int64_t I_, O_;
};

// TfevoNeatCompile + TfevoNeatForward per member, the program kept in per-thread scratch.
template <typename T>
class EvaluateOp : public OpKernel {
 public:
  explicit EvaluateOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_inputs", &I_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_outputs", &O_));
    OP_REQUIRES_OK(ctx, ReadOptions(ctx, "TfevoNeatEvaluate", &acts_, &aggs_));
    record_ = tfevo_neat_record::Lookup(ctx);
  }
  ~EvaluateOp() override {
    if (record_ != nullptr) record_->Unref();
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& nodes_t = ctx->input(0);
    const Tensor& conns_t = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckGenomes(nodes_t, conns_t, "TfevoNeatEvaluate"));
    const int64_t P = nodes_t.dim_size(0), N = nodes_t.dim_size(1), C = conns_t.dim_size(1);
    OP_REQUIRES(ctx, I_ + O_ <= N,
                tensorflow::errors::InvalidArgument("TfevoNeatEvaluate: ", I_, " inputs + ", O_,
                                                    " outputs exceed the ", N, " node slots"));
    Program pg;  // only P and the active mask
    pg.P = P;
    OP_REQUIRES_OK(ctx, ReadActive(ctx, 3, "TfevoNeatEvaluate", &pg));
    Inputs<T> in;
    OP_REQUIRES_OK(ctx, ReadInputs(ctx->input(2), P, I_, "TfevoNeatEvaluate", &in));
    const int64_t B = in.B, I = I_, O = O_;
    Tensor* y_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({P, B, O}), &y_t));
    T* y = y_t->flat<T>().data();
    const float* nodes = nodes_t.flat<float>().data();
    const float* conns = conns_t.flat<float>().data();
    const int ns = static_cast<int>(record_ != nullptr ? record_->Width(nodes_t) : N);
    const int cs = static_cast<int>(record_ != nullptr ? record_->Width(conns_t) : C);
    auto work = [&](int64_t begin, int64_t end) {
      Compiler comp(N, C, I, true, acts_, aggs_);
      std::vector<int32_t> pr(N * 4), sp(C);
      std::vector<float> cf(N * 2), wp(C);
      RowScratch<T> rs(N, C, B);
      for (int64_t p = begin; p < end; ++p) {
        T* yp = y + p * B * O;
        if (pg.active != nullptr && !pg.active[p]) {
          std::fill(yp, yp + B * O, T(0));
          continue;
        }
        int edges = 0;
        if (p + 4 < end) tfevo_prefetch::Floats(nodes + (p + 4) * N * 5, ns * 5);  // a later member's rows
        if (p + 4 < end) tfevo_prefetch::Floats(conns + (p + 4) * C * 5, cs * 5);
        const int cnt = comp.Compile(nodes + p * N * 5, conns + p * C * 5, pr.data(), cf.data(), sp.data(),
                                     wp.data(), &edges, ns, cs);
        ForwardMember(MemberProgram{pr.data(), cf.data(), sp.data(), wp.data(), cnt}, in.rows(p), B, I, O, &rs, yp);
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    const int64_t cost = 40 * (N + C) + 8 * C * 4 + B * 60 * N;
    tensorflow::Shard(pool->num_threads, pool->workers, P, cost, work);
  }

 private:
  int64_t I_, O_;
  std::vector<int> acts_, aggs_;
  tfevo_neat_record::BredRecord* record_ = nullptr;
};

template <typename T>
class RecurrentStepOp : public OpKernel {
 public:
  explicit RecurrentStepOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_inputs", &I_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_outputs", &O_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("settle_steps", &settle_));
  }

  void Compute(OpKernelContext* ctx) override {
    Program pg;
    OP_REQUIRES_OK(ctx, ReadProgram(ctx, "TfevoNeatRecurrentStep", &pg));
    OP_REQUIRES_OK(ctx, ReadActive(ctx, 7, "TfevoNeatRecurrentStep", &pg));
    const Tensor& state_t = ctx->input(5);
    OP_REQUIRES(ctx, state_t.dims() == 3 && state_t.dim_size(0) == pg.P && state_t.dim_size(2) == pg.N,
                tensorflow::errors::InvalidArgument("TfevoNeatRecurrentStep: state must be [P=", pg.P, ", B, N=",
                                                    pg.N, "], got ", state_t.shape().DebugString()));
    OP_REQUIRES(ctx, I_ + O_ <= pg.N,
                tensorflow::errors::InvalidArgument("TfevoNeatRecurrentStep: ", I_, " inputs + ", O_,
                                                    " outputs exceed the ", pg.N, " node slots"));
    const int64_t B = state_t.dim_size(1);
    Inputs<T> in;
    OP_REQUIRES_OK(ctx, ReadInputs(ctx->input(6), pg.P, I_, "TfevoNeatRecurrentStep", &in));
    OP_REQUIRES(ctx, in.B == B,
                tensorflow::errors::InvalidArgument("TfevoNeatRecurrentStep: x has ", in.B, " rows, state has ", B));
    const int64_t P = pg.P, N = pg.N, C = pg.C, I = I_, O = O_;
    Tensor *ns_t, *y_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({P, B, N}), &ns_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({P, B, O}), &y_t));
    const T* state = state_t.flat<T>().data();
    T* ns = ns_t->flat<T>().data();
    T* y = y_t->flat<T>().data();
    const int64_t settle = settle_;
    std::atomic<bool> bad(false);
    auto work = [&](int64_t begin, int64_t end) {
      std::vector<T> cur(N), nxt(N), scratch(C + 1);
      for (int64_t p = begin; p < end; ++p) {
        const T* sp = state + p * B * N;
        T* out = ns + p * B * N;
        T* yp = y + p * B * O;
        if (pg.active != nullptr && !pg.active[p]) {
          std::memcpy(out, sp, B * N * sizeof(T));
          std::fill(yp, yp + B * O, T(0));
          continue;
        }
        if (!ValidMember(pg, p)) {
          bad = true;
          std::memcpy(out, sp, B * N * sizeof(T));
          std::fill(yp, yp + B * O, T(0));
          continue;
        }
        const MemberProgram m = Member(pg, p);
        const T* xp = in.rows(p);
        for (int64_t b = 0; b < B; ++b) {
          std::memcpy(cur.data(), sp + b * N, N * sizeof(T));
          std::memcpy(cur.data(), xp + b * I, I * sizeof(T));
          for (int64_t s = 0; s < settle; ++s) {
            std::memcpy(nxt.data(), cur.data(), N * sizeof(T));
            m.Run(cur.data(), nxt.data(), scratch.data());
            std::swap(cur, nxt);
          }
          std::memcpy(out + b * N, cur.data(), N * sizeof(T));
          std::memcpy(yp + b * O, cur.data() + I, O * sizeof(T));
        }
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    const int64_t total = B * std::max<int64_t>(settle, 1) * ProgramWork(pg) + B * N * P / 4;
    if (total < kInline) {
      work(0, P);
    } else {
      tensorflow::Shard(pool->num_threads, pool->workers, P, std::max<int64_t>(1, total / std::max<int64_t>(P, 1)),
                        work);
    }
    OP_REQUIRES(ctx, !bad.load(),
                tensorflow::errors::InvalidArgument("TfevoNeatRecurrentStep: malformed program"));
  }

 private:
  int64_t I_, O_, settle_;
};

// a * b rounded to double before it meets any addition: the volatile store stops the
// compiler from contracting a following add into a fused multiply-add (-march=native has
// FMA), so every product rounds exactly as in NumPy and in the XLA reference (_rounded_mul).
inline double RoundedMul(double a, double b) {
  volatile double r = a * b;
  return r;
}

// One CartPole-v1 step of Gymnasium's float64 Euler dynamics (same operation order as
// tfevo.envs.classic.CartPole._dynamics); returns whether the episode terminated.
inline bool CartPoleStep(const double* c, int action, double* s) {
  const double force_mag = c[0], pml = c[1], total_mass = c[2], gravity = c[3], length = c[4];
  const double four_thirds = c[5], masspole = c[6], tau = c[7], x_thr = c[8], th_thr = c[9];
  double x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
  const double force = action == 1 ? force_mag : -force_mag;
  const double costheta = std::cos(theta);
  const double sintheta = std::sin(theta);
  const double temp = (force + RoundedMul(RoundedMul(pml, theta_dot * theta_dot), sintheta)) / total_mass;
  const double den = RoundedMul(length, four_thirds - RoundedMul(masspole, costheta * costheta) / total_mass);
  const double thetaacc = (RoundedMul(gravity, sintheta) - RoundedMul(costheta, temp)) / den;
  const double xacc = temp - RoundedMul(RoundedMul(pml, thetaacc), costheta) / total_mass;
  x = x + RoundedMul(tau, x_dot);
  x_dot = x_dot + RoundedMul(tau, xacc);
  theta = theta + RoundedMul(tau, theta_dot);
  theta_dot = theta_dot + RoundedMul(tau, thetaacc);
  s[0] = x; s[1] = x_dot; s[2] = theta; s[3] = theta_dot;
  return x < -x_thr || x > x_thr || theta < -th_thr || theta > th_thr;
}

class CartPoleRolloutOp : public OpKernel {
 public:
  explicit CartPoleRolloutOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_inputs", &I_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_outputs", &O_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_steps", &max_steps_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_episode_steps", &max_episode_steps_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("sutton_barto_reward", &sutton_barto_));
    OP_REQUIRES(ctx, I_ == 4, tensorflow::errors::InvalidArgument(
                                  "TfevoNeatCartPoleRollout: CartPole has 4 observations, num_inputs is ", I_));
    OP_REQUIRES(ctx, O_ <= 2, tensorflow::errors::InvalidArgument(
                                  "TfevoNeatCartPoleRollout: num_outputs must be 1 or 2, got ", O_));
  }

  void Compute(OpKernelContext* ctx) override {
    Program pg;
    OP_REQUIRES_OK(ctx, ReadProgram(ctx, "TfevoNeatCartPoleRollout", &pg));
    pg.active = nullptr;
    const int64_t P = pg.P, N = pg.N, C = pg.C, I = I_, O = O_;
    OP_REQUIRES(ctx, I + O <= N,
                tensorflow::errors::InvalidArgument("TfevoNeatCartPoleRollout: ", I, " inputs + ", O,
                                                    " outputs exceed the ", N, " node slots"));
    const Tensor& phys_t = ctx->input(5);
    const Tensor& const_t = ctx->input(6);
    OP_REQUIRES(ctx, phys_t.dims() == 2 && phys_t.dim_size(1) == 4 && P > 0 && phys_t.dim_size(0) % P == 0,
                tensorflow::errors::InvalidArgument("TfevoNeatCartPoleRollout: physics must be [P * B, 4] with P = ",
                                                    P, ", got ", phys_t.shape().DebugString()));
    OP_REQUIRES(ctx, const_t.NumElements() == 10,
                tensorflow::errors::InvalidArgument("TfevoNeatCartPoleRollout: constants must have 10 values, got ",
                                                    const_t.shape().DebugString()));
    const int64_t n = phys_t.dim_size(0), B = n / P;
    const double* phys = phys_t.flat<double>().data();
    const double* cst = const_t.flat<double>().data();
    Tensor *ret_t, *len_t, *obs_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &ret_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n}), &len_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({n, 4}), &obs_t));
    double* ret = ret_t->flat<double>().data();
    int32_t* len = len_t->flat<int32_t>().data();
    float* fobs = obs_t->flat<float>().data();
    const int64_t T = max_steps_, E = max_episode_steps_;
    const bool sb = sutton_barto_;
    std::atomic<bool> bad(false);
    auto work = [&](int64_t begin, int64_t end) {
      std::vector<float> v(N), scratch(C + 1);
      for (int64_t p = begin; p < end; ++p) {
        const bool ok = ValidMember(pg, p);
        if (!ok) bad = true;
        MemberProgram m = Member(pg, p);
        if (!ok) m.count = 0;
        for (int64_t b = 0; b < B; ++b) {
          const int64_t row = p * B + b;
          double s[4] = {phys[row * 4], phys[row * 4 + 1], phys[row * 4 + 2], phys[row * 4 + 3]};
          float obs[4];
          for (int i = 0; i < 4; ++i) obs[i] = static_cast<float>(s[i]);
          float* fo = fobs + row * 4;
          std::memcpy(fo, obs, sizeof(obs));
          double total = 0.0;
          int32_t steps = 0;
          for (int64_t t = 0; t < T; ++t) {
            std::fill(v.begin(), v.end(), 0.0f);
            std::memcpy(v.data(), obs, sizeof(obs));
            m.Run(v.data(), v.data(), scratch.data());
            // outputs -> action as the XLA-compiled reference: y > 0.5 for one output; for two,
            // argmax keeping the first unless it is not >= the second (NaN -> 1)
            int action;
            if (O == 1) {
              action = v[I] > 0.5f ? 1 : 0;
            } else {
              action = v[I] >= v[I + 1] ? 0 : 1;
            }
            const bool terminated = CartPoleStep(cst, action, s);
            const bool truncated = E > 0 && t + 1 >= E;  // the env's step counter starts at 0
            total += sb ? (terminated ? -1.0 : 0.0) : 1.0;
            ++steps;
            for (int i = 0; i < 4; ++i) obs[i] = static_cast<float>(s[i]);
            std::memcpy(fo, obs, sizeof(obs));
            if (terminated || truncated) break;
          }
          ret[row] = total;
          len[row] = steps;
        }
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    // cost per member: up to T steps of network + dynamics (~ 100 ns + the program)
    const int64_t per = std::max<int64_t>(1, B * (T > 0 ? T : 1) * (100 + ProgramWork(pg) / std::max<int64_t>(P, 1)));
    tensorflow::Shard(pool->num_threads, pool->workers, P, per, work);
    OP_REQUIRES(ctx, !bad.load(), tensorflow::errors::InvalidArgument("TfevoNeatCartPoleRollout: malformed program"));
  }

 private:
  int64_t I_, O_, max_steps_, max_episode_steps_;
  bool sutton_barto_;
};

REGISTER_KERNEL_BUILDER(Name("TfevoNeatCompile").Device(DEVICE_CPU), CompileOp);
#define TFEVO_NEAT_VALUE_KERNELS(T)                                                                           \
  REGISTER_KERNEL_BUILDER(Name("TfevoNeatForward").Device(DEVICE_CPU).TypeConstraint<T>("T"), ForwardOp<T>);   \
  REGISTER_KERNEL_BUILDER(Name("TfevoNeatEvaluate").Device(DEVICE_CPU).TypeConstraint<T>("T"), EvaluateOp<T>); \
  REGISTER_KERNEL_BUILDER(Name("TfevoNeatRecurrentStep").Device(DEVICE_CPU).TypeConstraint<T>("T"), RecurrentStepOp<T>);
TFEVO_NEAT_VALUE_KERNELS(float)
TFEVO_NEAT_VALUE_KERNELS(double)
#undef TFEVO_NEAT_VALUE_KERNELS
REGISTER_KERNEL_BUILDER(Name("TfevoNeatCartPoleRollout").Device(DEVICE_CPU), CartPoleRolloutOp);

}  // namespace
}  // namespace tfevo_neat_forward
