// TfevoNeatBreed: NEAT breeding (crossover by markers, structural and
// attribute mutation, innovation markers, compaction) for a whole population
// in one CPU kernel.
//
// Pure-TensorFlow reference: the graph path of tfevo.neat.neat._breed
// (operators.crossover_given -> mutate_pre -> pair_markers -> mutate_post ->
// compact).  Every random number comes in as an input, drawn outside by
// TensorFlow's stateless kernels exactly as the reference draws them:
//
//   words  int32 [P, ceil((4 wn + 4 wc) / 32)]   crossover coins (bit j of a row)
//   u_all  float [P, 13 + wn*kn + wc*kc]           mutation uniforms
//
// and each one is consumed at the same place and in the same way as in the
// reference, so the children are the reference's BIT FOR BIT: structure,
// node keys, markers, counters, skip counts and every float attribute.  For
// the floats this takes: float32 arithmetic in the reference's order with
// its float32 constants (passed in as attrs), no FMA contraction; divisions
// by a constant as Grappler rewrites them (x * (1 / c)); and the Box-Muller
// normal with TensorFlow's log1p/cos (see below).  On a machine whose
// TensorFlow build differs (no AVX), the normals agree to a few ulp.
//
// The bred slot range: TfevoNeatBreedWidths gives (wn, wc) = used width + 1
// node / + 3 connection slots (operators.used_width), the random numbers are
// drawn for that range, and the kernel reads the first wn / wc rows of the
// full-width parents (no slicing copies).
//
// Phases (P genomes, independent work split over TensorFlow's intra-op pool;
// results never depend on the number of threads):
//   -  add-node decisions, from parent 1's rows (DecideAddNode) [parallel]
//   -  node keys of the new nodes (prefix count over genomes)   [serial, O(P)]
//   A+B+C per genome, one after the other while the child is in cache:
//      A  crossover
//      B  add node, delete node, add-connection choice with the
//         feed-forward cycle check
//      C  write the new connection (marker left NaN), delete connection,
//         attribute mutation, compaction (genes first, NaN padded)  [parallel]
//   -  markers of the new (in, out) pairs: with per_generation every
//      distinct new pair gets a fresh marker (shared by the children adding
//      it); else a pair already in any child after B keeps its (smallest)
//      marker; fresh markers go in ascending order of the pair hash
//      in * 2^25 + out; written
//      into the new connections' rows                 [sort + parallel scan]

// Eigen's packet math is made to match TensorFlow's CPU build (AVX, no FMA):
// the Box-Muller normal uses Eigen's plog1p/pcos on 8-float packets where the
// reference's TensorFlow kernels use packets, and the scalar functions on the
// last (size % 8) elements of the reference's tensor, where TensorFlow's
// Eigen executor falls back to scalars.  With AVX-512 or FMA enabled here the
// polynomials would round differently.  The rest of the file is still compiled
// with -march=native; no FMA contraction anywhere (pragma below).
#if defined(__AVX2__)
#define TFEVO_BREED_AVX2 1  // for the key-column gathers (integer and gather instructions only)
#endif
#if defined(__AVX__)
#undef __AVX512F__
#undef __AVX512VL__
#undef __AVX512DQ__
#undef __AVX512BW__
#undef __AVX512CD__
#undef __AVX512FP16__
#undef __AVX512BF16__
#undef __AVX512VNNI__
#undef __AVX2__
#undef __FMA__
#undef __F16C__
#define TFEVO_BREED_PACKET 1
#endif
#pragma GCC optimize("fp-contract=off")

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif
#include <sys/mman.h>

#include "Eigen/Core"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/allocation_description.pb.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "neat_bred_record.h"
#include "phase_timer.h"
#include "prefetch.h"

namespace tfevo_neat_breed {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("TfevoNeatBreed")
    .Input("nodes: float")        // [P, >= wn, 5]  parents' nodes (rows >= wn unused)
    .Input("conns: float")        // [P, >= wc, 5]
    .Input("widths: int32")       // [2] (wn, wc): the slot range bred (see TfevoNeatBreedWidths)
    .Input("p1: int32")           // [P] fitter parent
    .Input("p2: int32")           // [P]
    .Input("is_elite: bool")      // [P] elites are copied (no mutation)
    .Input("words: int32")        // [P, W] crossover coins
    .Input("u_all: float")        // [P, 13 + wn*kn + wc*kc]
    .Input("next_key: int64")     // []
    .Input("next_marker: int64")  // []
    .Output("out_nodes: float")   // [P, max_nodes, 5]
    .Output("out_conns: float")   // [P, max_conns, 5]
    .Output("out_next_key: int64")
    .Output("out_next_marker: int64")
    .Output("skipped_nodes: int64")
    .Output("skipped_conns: int64")
    .Attr("max_nodes: int >= 1")
    .Attr("max_conns: int >= 1")
    .Attr("num_inputs: int >= 0")
    .Attr("num_outputs: int >= 0")
    .Attr("feed_forward: bool")
    .Attr("surer: bool")
    .Attr("share_split: bool")
    // [node_add, node_delete, conn_add, conn_delete] probabilities (float32)
    .Attr("probs: list(float)")
    // single_structural: at most one structural mutation per child, chosen by
    // the add-node uniform u falling in [cuts[k-1], cuts[k]) (neat-python's
    // single_structural_mutation; cuts = cumulative probs / max(1, sum))
    .Attr("single_structural: bool = false")
    .Attr("per_generation: bool = true")
    .Attr("cuts: list(float) = [0.0, 0.0, 0.0, 0.0]")
    // [default aggregation id, default activation id, enabled default 0/1]
    .Attr("defaults: list(float)")
    // float attributes bias, response, weight: 12 float32 constants each, see FloatParams
    .Attr("bias_params: list(float)")
    .Attr("response_params: list(float)")
    .Attr("weight_params: list(float)")
    .Attr("activation_ids: list(float)")
    .Attr("aggregation_ids: list(float)")
    // [activation rate, aggregation rate, enabled rate of an enabled connection, min(it, 1) / 2,
    //  1 / activation rate, 1 / aggregation rate, enabled rate of a disabled connection, min(it, 1) / 2]
    .Attr("rates: list(float)")
    // [kn, bias col, response col, activation col, aggregation col, kc, weight col, enabled col] (-1 = absent)
    .Attr("columns: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      int64_t n, m;
      TF_RETURN_IF_ERROR(c->GetAttr("max_nodes", &n));
      TF_RETURN_IF_ERROR(c->GetAttr("max_conns", &m));
      auto P = c->Dim(c->input(3), 0);
      c->set_output(0, c->MakeShape({P, c->MakeDim(n), c->MakeDim(5)}));
      c->set_output(1, c->MakeShape({P, c->MakeDim(m), c->MakeDim(5)}));
      for (int i = 2; i < 6; ++i) c->set_output(i, c->Scalar());
      return Status();
    })
    .Doc(R"doc(
NEAT breeding of a population given its random numbers (see tfevo/neat/_breed_op.py).
)doc");

REGISTER_OP("TfevoNeatBreedWidths")
    .Input("nodes: float")  // [P, N, 5]
    .Input("conns: float")  // [P, C, 5]
    .Attr("node_extra: int >= 0")
    .Attr("conn_extra: int >= 0")
    .Attr("kn: int >= 0")
    .Attr("kc: int >= 0")
    .Output("widths: int32")       // [2] (wn, wc)
    .Output("words_shape: int32")  // [2] (P, ceil((4 wn + 4 wc) / 32)): crossover.crossover_words
    .Output("u_shape: int32")      // [2] (P, 13 + wn kn + wc kc): operators.mutation_uniforms
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < 3; ++i) c->set_output(i, c->MakeShape({2}));
      return Status();
    })
    .Doc(R"doc(
The slot range NEAT breeds: min(1 + last used slot in any genome + extra, width)
for nodes and connections (operators.used_width), and the shapes of the two
random draws for that range.
)doc");

REGISTER_OP("TfevoNeatBreedShapes")
    .Input("used: int32")  // [2] 1 + last used node / connection slot of any genome (TfevoNeatSpeciate's `used`)
    .Attr("node_width: int >= 0")
    .Attr("conn_width: int >= 0")
    .Attr("pop_size: int >= 0")
    .Attr("node_extra: int >= 0")
    .Attr("conn_extra: int >= 0")
    .Attr("kn: int >= 0")
    .Attr("kc: int >= 0")
    .Output("widths: int32")
    .Output("words_shape: int32")
    .Output("u_shape: int32")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < 3; ++i) c->set_output(i, c->MakeShape({2}));
      return Status();
    })
    .Doc(R"doc(
TfevoNeatBreedWidths's outputs from the used slot counts it would scan for.
)doc");

namespace {

// prefetch distances in genomes (random parent rows in phase A, the child's
// rows in phases B and C)
constexpr int kParentsAhead = 2, kChildAhead = 2;
constexpr int kD = 5;  // columns of a node / connection row
constexpr int NODE_KEY = 0, NODE_BIAS = 1, NODE_RESPONSE = 2, NODE_AGG = 3, NODE_ACT = 4;
constexpr int CONN_IN = 0, CONN_OUT = 1, CONN_ENABLED = 2, CONN_WEIGHT = 3, CONN_MARKER = 4;
// per-genome uniform columns (operators._G_*)
constexpr int G_ADD_NODE = 0, G_SPLIT = 1, G_DEL_NODE = 2, G_DEL_WHICH = 3, G_ADD_CONN = 4, G_FROM = 5, G_TO = 6,
              G_W1 = 7, G_W2 = 8, G_DEL_CONN = 9, G_DEL_CWHICH = 10, G_R1 = 11, G_R2 = 12, G_COLS = 13;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kOneMinus = 1.0f - 5.9604644775390625e-08f;  // 1 - 2^-24
const float kTwoPi = static_cast<float>(6.283185307179586);

// float32 constants of one float attribute, each the float32 rounding the
// reference's TensorFlow ops use (computed in Python, see _breed_op.py)
struct FloatParams {
  bool mutates;     // rate > 0 or replace rate > 0
  float rate;       // perturb rate
  float rate_rep;   // rate + replace rate
  float rate_inv;   // 1 / max(rate, 1e-30)    (Grappler folds `x / c` into `x * (1 / c)`)
  float rep_inv;    // 1 / max(replace rate, 1e-30)
  float power;      // perturbation stdev
  float lo, hi;     // bounds
  bool uniform;     // init type
  float c0, c1;     // uniform: a, b - a; gaussian: mean, stdev
  explicit FloatParams(const std::vector<float>& v = std::vector<float>(12, 0.f))
      : mutates(v[0] != 0.f), rate(v[1]), rate_rep(v[2]), rate_inv(v[3]), rep_inv(v[4]), power(v[5]), lo(v[6]),
        hi(v[7]), uniform(v[8] != 0.f), c0(v[9]), c1(v[10]) {}
};

inline float Clip(float t, float lo, float hi) {  // tf.clip_by_value: max(min(t, hi), lo)
  float m = t < hi ? t : hi;
  return m > lo ? m : lo;
}

// operators._gauss: Box-Muller from v01 (decision uniform, rescaled) and u2,
// for n genes at once.  scalar[k]: the reference computed gene k on
// TensorFlow's scalar path (the tail of its tensor), else on 8-float packets.
inline float GaussScalar(float v01, float u2) {
  const float v = v01 < kOneMinus ? v01 : kOneMinus;
  const float l = Eigen::numext::log1p(-v);
  const float r = std::sqrt(-2.0f * l);
  const float a = kTwoPi * u2;
  return r * Eigen::numext::cos(a);
}

// flatten: Eigen's packet functions are inlined here (GCC otherwise calls each
// one-instruction packet op out of line, through the PLT); same operations, same order.
__attribute__((flatten)) inline void GaussBatch(const float* v01, const float* u2, const uint8_t* scalar, int n,
                                                float* out) {
#if TFEVO_BREED_PACKET
  using Pk = Eigen::internal::Packet8f;
  namespace ei = Eigen::internal;
  for (int k = 0; k < n; k += 8) {
    const int m = std::min(8, n - k);
    alignas(32) float a[8], b[8], r[8], c[8];
    for (int j = 0; j < 8; ++j) {
      const float v = j < m ? v01[k + j] : 0.5f;
      a[j] = -(v < kOneMinus ? v : kOneMinus);
      b[j] = kTwoPi * (j < m ? u2[k + j] : 0.5f);
    }
    const Pk l = ei::plog1p(ei::pload<Pk>(a));
    ei::pstore(r, ei::psqrt(ei::pmul(ei::pset1<Pk>(-2.0f), l)));
    ei::pstore(c, ei::pcos(ei::pload<Pk>(b)));
    for (int j = 0; j < m; ++j) out[k + j] = scalar[k + j] ? GaussScalar(v01[k + j], u2[k + j]) : r[j] * c[j];
  }
#else
  for (int k = 0; k < n; ++k) out[k] = GaussScalar(v01[k], u2[k]);
#endif
}

inline float Gauss1(float v01, float u2, bool scalar) {
  float g;
  const uint8_t sc = scalar ? 1 : 0;
  GaussBatch(&v01, &u2, &sc, 1, &g);
  return g;
}

// operators._fresh_float given its normal draw g (unused with uniform init)
inline float Fresh(const FloatParams& f, float v01, float g) {
  if (f.uniform) {
    const float t = f.c1 * v01;
    return f.c0 + t;
  }
  const float t = f.c1 * g;
  return Clip(f.c0 + t, f.lo, f.hi);
}

// operators._mutate_float, first half: 0 = unchanged, 1 = perturb, 2 = replace;
// v01 = the decision uniform rescaled to its interval
inline int Decide(const FloatParams& f, float r, float* v01) {
  if (r < f.rate) {
    *v01 = r * f.rate_inv;
    return 1;
  }
  if (r < f.rate_rep) {
    const float d = r - f.rate;
    *v01 = d * f.rep_inv;
    return 2;
  }
  return 0;
}

inline bool NeedsGauss(const FloatParams& f, int kind) { return kind == 1 || (kind == 2 && !f.uniform); }

// second half, given the normal draw g
inline float Apply(const FloatParams& f, int kind, float v, float v01, float g) {
  if (kind == 1) {
    const float t = f.power * g;
    return Clip(v + t, f.lo, f.hi);
  }
  if (kind == 2) return Fresh(f, v01, g);
  return v;
}

// a fresh value for gene e of a reference tensor of T elements
inline float FreshAt(const FloatParams& f, float v01, float u2, int64_t e, int64_t T) {
  const float g = f.uniform ? 0.f : Gauss1(v01, u2, e >= T - T % 8);
  return Fresh(f, v01, g);
}

inline bool Valid(const float* row) { return !std::isnan(row[0]); }

// operators._random_choice over the rows of one genome: the floor(u * count)-th
// true slot; (slot, has); slot 0 when there is none (tf.argmax of zeros)
template <class Pred>
inline int RandomChoice(int K, Pred pred, float u, bool* has) {
  int cnt = 0;
  for (int s = 0; s < K; ++s) cnt += pred(s) ? 1 : 0;
  *has = cnt > 0;
  if (cnt == 0) return 0;
  float x = u * static_cast<float>(cnt);
  int k = static_cast<int>(x);
  if (k > cnt - 1) k = cnt - 1;
  for (int s = 0; s < K; ++s) {
    if (pred(s)) {
      if (k == 0) return s;
      --k;
    }
  }
  return 0;
}

// RandomChoice when the true slots are exactly [0, cnt)
inline int RandomChoiceFirst(int cnt, float u, bool* has) {
  *has = cnt > 0;
  if (cnt == 0) return 0;
  float x = u * static_cast<float>(cnt);
  int k = static_cast<int>(x);
  if (k > cnt - 1) k = cnt - 1;
  return k;
}

inline int64_t PairHash(float a, float b) {  // genome.pair_hash
  const int64_t x = static_cast<int64_t>(std::isnan(a) ? -1.0f : a);
  const int64_t y = static_cast<int64_t>(std::isnan(b) ? -1.0f : b);
  return x * (int64_t{1} << 25) + y;
}

// One column of rows [0, K) (`base` = its first entry, stride kD) as a contiguous array, padded with
// NaN to a multiple of 8 (so FirstEqual's 8-wide loads never match past K).
inline float* KeyColumn(const float* base, int K, std::vector<float>* buf) {
  const int padded = (K + 7) & ~7;
  if (static_cast<int>(buf->size()) < padded) buf->resize(padded);
  float* out = buf->data();
#if defined(TFEVO_BREED_AVX2)
  // eight keys per gather and one 8-wide store each: FirstEqual's 8-wide loads then read
  // whole stores (scalar stores would make each load wait until they all reach the cache)
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 nan = _mm256_set1_ps(kNaN);
  for (int t = 0; t < padded; t += 8) {
    const __m256i slot = _mm256_add_epi32(_mm256_set1_epi32(t), lane);
    const __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32(K), slot);
    const __m256i idx = _mm256_mullo_epi32(slot, _mm256_set1_epi32(kD));
    _mm256_storeu_ps(out + t, _mm256_mask_i32gather_ps(nan, base, idx, _mm256_castsi256_ps(in), 4));
  }
#else
  for (int t = 0; t < K; ++t) out[t] = base[t * kD];
  for (int t = K; t < padded; ++t) out[t] = kNaN;
#endif
  return out;
}

// The first t < K with keys[t] == q on a KeyColumn (ordered float equality:
// NaN never matches, -0 == +0), or -1.  The reference's stable sort + binary
// search finds the same index (the smallest among equal keys).  Eight keys
// per compare.
inline int FirstEqual(const float* keys, int K, float q) {
  if (std::isnan(q)) return -1;
#if defined(__AVX__)
  const __m256 vq = _mm256_set1_ps(q);
  for (int t = 0; t < K; t += 8) {
    const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(keys + t), vq, _CMP_EQ_OQ));
    if (m != 0) {
      const int r = t + __builtin_ctz(static_cast<unsigned>(m));
      return r < K ? r : -1;
    }
  }
  return -1;
#else
  for (int t = 0; t < K; ++t)
    if (keys[t] == q) return t;
  return -1;
#endif
}

// Per-thread scratch, reused across the genomes of one work unit (no heap
// allocation or thread_local lookup per genome).
struct Scratch {
  std::vector<float> keys;  // KeyColumn
  std::vector<int> ein, eout;
  std::vector<char> reach;
  std::vector<float> gv, gu, gout, v01s;
  std::vector<uint8_t> gsc, kinds;
};

// Per-genome bookkeeping between the phases.
struct GenomeState {
  // add node
  bool add_node = false;
  bool no_conns = false;  // the child had no connection when add-node was decided
  int nslot = 0, csel = 0, c1 = 0, c2 = 0;
  int64_t split_marker = 0;
  int64_t nid = 0;
  // add connection
  bool add_conn = false;
  int cslot = 0;
  float ka = 0.f, kb = 0.f;
  int64_t hash = 0;
  int group = -1;
  // skip counts
  int skip_n = 0, skip_c = 0;
  // valid rows of the child (after compaction)
  int count_n = 0, count_c = 0;
  // phase C: the row the new connection ends in after compaction (-1: none
  // or deleted again), and the connection deleted (its in, out, marker)
  int new_row = -1;
  bool add_conn_deleted = false, deleted = false;
  float del_in = 0.f, del_out = 0.f, del_marker = 0.f;
};

// A float buffer on 2 MB pages where the kernel allows (madvise before the
// first touch): the kept outputs live across generations, and breeding reads
// parents at random rows of a 19 MB population at pop 10000.
class HugeBuffer : public tensorflow::TensorBuffer {
 public:
  HugeBuffer(void* p, size_t bytes, size_t mapped) : TensorBuffer(p), bytes_(bytes), mapped_(mapped) {}
  ~HugeBuffer() override { munmap(data(), mapped_); }
  size_t size() const override { return bytes_; }
  TensorBuffer* root_buffer() override { return this; }
  void FillAllocationDescription(tensorflow::AllocationDescription* proto) const override {
    proto->set_requested_bytes(static_cast<int64_t>(bytes_));
    proto->set_allocator_name("tfevo_neat_breed");
  }

 private:
  size_t bytes_, mapped_;
};

inline bool HugeTensor(const TensorShape& shape, Tensor* out) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = static_cast<size_t>(shape.num_elements()) * sizeof(float);
  if (bytes < kHuge) return false;
  const size_t mapped = (bytes + kHuge - 1) / kHuge * kHuge;
  // over-map to align to 2 MB, then give back the unaligned ends
  void* raw = mmap(nullptr, mapped + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(raw), al = (a + kHuge - 1) & ~(kHuge - 1);
  if (al > a) munmap(raw, al - a);
  if (a + mapped + kHuge > al + mapped) munmap(reinterpret_cast<void*>(al + mapped), a + mapped + kHuge - al - mapped);
  void* p = reinterpret_cast<void*>(al);
  madvise(p, mapped, MADV_HUGEPAGE);
  auto* buf = new HugeBuffer(p, bytes, mapped);
  *out = Tensor(tensorflow::DT_FLOAT, shape, buf);
  buf->Unref();
  return true;
}

class NeatBreedOp : public OpKernel {
 public:
  explicit NeatBreedOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    int64_t v;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_nodes", &v));
    N_ = static_cast<int>(v);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_conns", &v));
    C_ = static_cast<int>(v);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_inputs", &v));
    I_ = static_cast<int>(v);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_outputs", &v));
    O_ = static_cast<int>(v);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("feed_forward", &feed_forward_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("surer", &surer_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("share_split", &share_split_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("single_structural", &single_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("per_generation", &per_generation_));
    std::vector<float> cuts;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("cuts", &cuts));
    OP_REQUIRES(ctx, cuts.size() == 4, tensorflow::errors::InvalidArgument("TfevoNeatBreed: cuts needs 4 values"));
    for (int k = 0; k < 4; ++k) cuts_[k] = cuts[k];
    std::vector<float> probs, defaults, b, r, w, rates;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("probs", &probs));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("defaults", &defaults));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bias_params", &b));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("response_params", &r));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_params", &w));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activation_ids", &act_ids_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("aggregation_ids", &agg_ids_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rates", &rates));
    std::vector<int64_t> cols;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("columns", &cols));
    OP_REQUIRES(ctx, probs.size() == 4 && defaults.size() == 3 && b.size() == 12 && r.size() == 12 &&
                         w.size() == 12 && rates.size() == 8 && cols.size() == 8,
                tensorflow::errors::InvalidArgument("TfevoNeatBreed: malformed attrs"));
    p_add_node_ = probs[0];
    p_del_node_ = probs[1];
    p_add_conn_ = probs[2];
    p_del_conn_ = probs[3];
    probs_[0] = p_add_node_;
    probs_[1] = p_del_node_;
    probs_[2] = p_add_conn_;
    probs_[3] = p_del_conn_;
    agg_default_ = defaults[0];
    act_default_ = defaults[1];
    en_default_ = defaults[2];
    bias_ = FloatParams(b);
    resp_ = FloatParams(r);
    weight_ = FloatParams(w);
    act_rate_ = rates[0];
    agg_rate_ = rates[1];
    en_rate_ = rates[2];
    en_half_ = rates[3];
    act_inv_ = rates[4];
    agg_inv_ = rates[5];
    en_rate_off_ = rates[6];
    en_half_off_ = rates[7];
    kn_ = static_cast<int>(cols[0]);
    col_bias_ = static_cast<int>(cols[1]);
    col_resp_ = static_cast<int>(cols[2]);
    col_act_ = static_cast<int>(cols[3]);
    col_agg_ = static_cast<int>(cols[4]);
    kc_ = static_cast<int>(cols[5]);
    col_w_ = static_cast<int>(cols[6]);
    col_en_ = static_cast<int>(cols[7]);
    record_ = tfevo_neat_record::Lookup(ctx);
  }

  void Compute(OpKernelContext* ctx) override {
    tfevo_timing::PhaseTimer timer("TfevoNeatBreed");
    const Tensor& nodes_t = ctx->input(0);
    const Tensor& conns_t = ctx->input(1);
    const Tensor& widths_t = ctx->input(2);
    const Tensor& p1_t = ctx->input(3);
    const Tensor& p2_t = ctx->input(4);
    const Tensor& elite_t = ctx->input(5);
    const Tensor& words_t = ctx->input(6);
    const Tensor& u_t = ctx->input(7);
    const Tensor& nk_t = ctx->input(8);
    const Tensor& nm_t = ctx->input(9);
    using tensorflow::errors::InvalidArgument;
    OP_REQUIRES(ctx, nodes_t.dims() == 3 && nodes_t.dim_size(2) == kD,
                InvalidArgument("TfevoNeatBreed: nodes must be [P, wn, 5], got ", nodes_t.shape().DebugString()));
    const int64_t P = nodes_t.dim_size(0);
    OP_REQUIRES(ctx, conns_t.dims() == 3 && conns_t.dim_size(2) == kD && conns_t.dim_size(0) == P,
                InvalidArgument("TfevoNeatBreed: conns must be [P, wc, 5], got ", conns_t.shape().DebugString()));
    OP_REQUIRES(ctx, widths_t.NumElements() == 2,
                InvalidArgument("TfevoNeatBreed: widths must be [2], got ", widths_t.shape().DebugString()));
    const int wn = widths_t.flat<int32_t>()(0), wc = widths_t.flat<int32_t>()(1);
    const int n_in = static_cast<int>(nodes_t.dim_size(1)), c_in = static_cast<int>(conns_t.dim_size(1));
    OP_REQUIRES(ctx, wn <= N_ && wc <= C_ && wn >= I_ + O_ && wc >= 0 && wn <= n_in && wc <= c_in,
                InvalidArgument("TfevoNeatBreed: slot widths ", wn, "/", wc, " outside [", I_ + O_, ", ",
                                std::min(N_, n_in), "] / [0, ", std::min(C_, c_in), "]"));
    for (const Tensor* t : {&p1_t, &p2_t, &elite_t})
      OP_REQUIRES(ctx, t->dims() == 1 && t->dim_size(0) == P,
                  InvalidArgument("TfevoNeatBreed: p1, p2, is_elite must be [", P, "], got ",
                                  t->shape().DebugString()));
    const int64_t W = (4 * int64_t{wn} + 4 * int64_t{wc} + 31) / 32;
    OP_REQUIRES(ctx, words_t.dims() == 2 && words_t.dim_size(0) == P && words_t.dim_size(1) >= W,
                InvalidArgument("TfevoNeatBreed: words must be [", P, ", >= ", W, "], got ",
                                words_t.shape().DebugString()));
    const int64_t U = G_COLS + int64_t{wn} * kn_ + int64_t{wc} * kc_;
    OP_REQUIRES(ctx, u_t.dims() == 2 && u_t.dim_size(0) == P && u_t.dim_size(1) == U,
                InvalidArgument("TfevoNeatBreed: u_all must be [", P, ", ", U, "], got ", u_t.shape().DebugString()));
    const int32_t* p1 = p1_t.flat<int32_t>().data();
    const int32_t* p2 = p2_t.flat<int32_t>().data();
    for (int64_t i = 0; i < P; ++i)
      OP_REQUIRES(ctx, p1[i] >= 0 && p1[i] < P && p2[i] >= 0 && p2[i] < P,
                  InvalidArgument("TfevoNeatBreed: parent index out of range at child ", i));

    // The children go into an earlier output of this kernel that nothing else
    // references any more (its rows past the widths it bred are NaN already),
    // else into fresh memory.
    const std::shared_ptr<const std::vector<int32_t>> parent_counts = ParentCounts(nodes_t, conns_t);
    OutBuffers buf;
    OP_REQUIRES_OK(ctx, TakeBuffers(ctx, P, &buf));
    Tensor* on_t = &buf.nodes;
    Tensor* oc_t = &buf.conns;
    ctx->set_output(0, buf.nodes);
    ctx->set_output(1, buf.conns);
    Tensor *nk_out, *nm_out, *skn_out, *skc_out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({}), &nk_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({}), &nm_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({}), &skn_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(5, TensorShape({}), &skc_out));

    Ctx c;
    c.nodes = nodes_t.flat<float>().data();
    c.conns = conns_t.flat<float>().data();
    c.n_in = n_in;
    c.c_in = c_in;
    c.p1 = p1;
    c.p2 = p2;
    c.elite = elite_t.flat<bool>().data();
    c.words = reinterpret_cast<const uint32_t*>(words_t.flat<int32_t>().data());
    c.W = words_t.dim_size(1);
    c.u = u_t.flat<float>().data();
    c.U = U;
    c.P = P;
    c.wn = wn;
    c.wc = wc;
    c.on = on_t->flat<float>().data();
    c.oc = oc_t->flat<float>().data();
    // NaN is written over the rows past the bred ones up to where the buffer
    // may hold genes (every row of fresh memory)
    c.fill_n = std::max(wn, buf.dirty_n);
    c.fill_c = std::max(wc, buf.dirty_c);
    std::vector<GenomeState> st(P);
    c.st = st.data();
    c.parent_counts = parent_counts != nullptr ? parent_counts->data() : nullptr;

    int64_t next_key = nk_t.scalar<int64_t>()();
    int64_t next_marker = nm_t.scalar<int64_t>()();

    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    auto run = [&](int64_t cost, const std::function<void(int64_t, int64_t)>& fn) {
      if (P * cost < 200000) {  // small: waking pool threads costs more than it saves
        fn(0, P);
      } else {
        tensorflow::Shard(pool->num_threads, pool->workers, P, cost, fn);
      }
    };
    const int64_t cost = 40 * (int64_t{wn} + wc) + 8 * int64_t{wn} * wn;

    timer.Mark("setup");
    // ---- add-node decisions (from parent 1's rows, see DecideAddNode)
    if (p_add_node_ > 0.f) {
      run(8 * (int64_t{wn} + wc), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) DecideAddNode(c, i);
      });
    }
    timer.Mark("add-node");
    // ---- new node keys (operators.mutate_pre: exclusive count, or one key per split marker)
    int64_t nnew = 0;
    if (p_add_node_ > 0.f) {
      if (share_split_) {
        // ids in order of first occurrence among the genomes that split
        std::vector<std::pair<int64_t, int64_t>> idx;  // sorted (marker, id)
        for (int64_t i = 0; i < P; ++i) {
          GenomeState& g = st[i];
          if (!g.add_node) continue;
          auto it = std::lower_bound(idx.begin(), idx.end(), std::make_pair(g.split_marker, int64_t{-1}));
          if (it != idx.end() && it->first == g.split_marker) {
            g.nid = it->second;
          } else {
            g.nid = nnew++;
            idx.insert(it, std::make_pair(g.split_marker, g.nid));
          }
        }
      } else {
        for (int64_t i = 0; i < P; ++i) {
          if (st[i].add_node) st[i].nid = nnew++;
        }
      }
    }
    // ---- A, B, C per genome, one after the other while the child is in
    // cache: crossover; add node, delete node, add-connection choice; write
    // the new connection (its marker is patched in below), delete
    // connection, attributes, compaction
    run(3 * cost + 4 * int64_t{wc} * wn + 30 * (int64_t{wn} * kn_ + int64_t{wc} * kc_), [&](int64_t b, int64_t e) {
      Scratch sc;
      for (int64_t i = b; i < e; ++i) {
        PrefetchChild(c, i);
        PhaseA(c, i, sc);
        PhaseB(c, i, next_key, next_marker, sc);
        PhaseC(c, i, sc);
      }
    });
    timer.Mark("ABC");
    next_key += nnew;
    next_marker += 2 * nnew;
    // ---- markers of the new pairs, written into the new connections' rows
    if (p_add_conn_ > 0.f || (surer_ && p_add_node_ > 0.f)) {
      next_marker = PairMarkers(c, P, next_marker, run);
      for (int64_t i = 0; i < P; ++i) {
        const GenomeState& g = st[i];
        if (g.add_conn && g.new_row >= 0) c.oc[(i * int64_t{C_} + g.new_row) * kD + CONN_MARKER] = c.gm[g.group];
      }
    }
    timer.Mark(buf.reused ? "markers(reused)" : "markers(fresh)");
    buf.dirty_n = wn;
    buf.dirty_c = wc;
    {
      auto counts = std::make_shared<std::vector<int32_t>>(2 * P);
      for (int64_t i = 0; i < P; ++i) {
        (*counts)[2 * i] = st[i].count_n;
        (*counts)[2 * i + 1] = st[i].count_c;
      }
      buf.counts = std::move(counts);
    }
    KeepBuffers(std::move(buf));
    int64_t skn = 0, skc = 0;
    for (int64_t i = 0; i < P; ++i) {
      skn += st[i].skip_n;
      skc += st[i].skip_c;
    }
    nk_out->scalar<int64_t>()() = next_key;
    nm_out->scalar<int64_t>()() = next_marker;
    skn_out->scalar<int64_t>()() = skn;
    skc_out->scalar<int64_t>()() = skc;
  }

 private:
  // An output pair of this kernel kept for reuse: in every child, the rows
  // from dirty_n / dirty_c on are NaN (all five columns).
  struct OutBuffers {
    Tensor nodes, conns;
    int dirty_n = 0, dirty_c = 0;
    bool reused = false;
    // valid node / connection rows of each child, [2 P] (the children are
    // compact: those rows come first, every other row is invalid)
    std::shared_ptr<const std::vector<int32_t>> counts;
  };
  static constexpr int kKeep = 3;  // outputs remembered (a run needs 2: the told population and the one before)

  // A kept pair of [P, N, 5] / [P, C, 5] outputs that only this kernel
  // references (the run, the user and TensorFlow have all let go of it, so
  // writing it changes no tensor anyone can see), else fresh memory.
  // Holding a reference is itself safe: TensorFlow never writes a buffer in
  // place (input forwarding, variable updates) unless its reference count is 1.
  Status TakeBuffers(OpKernelContext* ctx, int64_t P, OutBuffers* out) {
    {
      std::lock_guard<std::mutex> lock(kept_mu_);
      for (size_t k = 0; k < kept_.size(); ++k) {
        OutBuffers& b = kept_[k];
        if (b.nodes.dim_size(0) == P && b.conns.dim_size(0) == P && b.nodes.RefCountIsOne() &&
            b.conns.RefCountIsOne()) {
          *out = std::move(b);
          out->reused = true;
          kept_.erase(kept_.begin() + k);
          if (record_ != nullptr) {  // about to be written: no longer what the record says
            record_->Erase(out->nodes);
            record_->Erase(out->conns);
          }
          return Status();
        }
      }
    }
    if (!HugeTensor(TensorShape({P, N_, kD}), &out->nodes))
      TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({P, N_, kD}), &out->nodes));
    if (!HugeTensor(TensorShape({P, C_, kD}), &out->conns))
      TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({P, C_, kD}), &out->conns));
    out->dirty_n = N_;
    out->dirty_c = C_;
    out->reused = false;
    return Status();
  }

  // The valid row counts of the parents when they are a kept output of this
  // kernel (the same buffers, full shape), else nullptr.
  std::shared_ptr<const std::vector<int32_t>> ParentCounts(const Tensor& nodes, const Tensor& conns) {
    std::lock_guard<std::mutex> lock(kept_mu_);
    for (const OutBuffers& b : kept_)
      if (b.counts != nullptr && b.nodes.data() == nodes.data() && b.conns.data() == conns.data() &&
          b.nodes.shape() == nodes.shape() && b.conns.shape() == conns.shape())
        return b.counts;
    return nullptr;
  }

  void KeepBuffers(OutBuffers&& b) {
    std::lock_guard<std::mutex> lock(kept_mu_);
    if (static_cast<int>(kept_.size()) >= kKeep) {  // the oldest goes: out of the record first
      if (record_ != nullptr) {
        record_->Erase(kept_.front().nodes);
        record_->Erase(kept_.front().conns);
      }
      kept_.erase(kept_.begin());
    }
    if (record_ != nullptr) {
      record_->Set(b.nodes, b.dirty_n);
      record_->Set(b.conns, b.dirty_c);
    }
    kept_.push_back(std::move(b));
  }

 public:
  ~NeatBreedOp() override {
    if (record_ == nullptr) return;
    for (const OutBuffers& b : kept_) {
      record_->Erase(b.nodes);
      record_->Erase(b.conns);
    }
    record_->Unref();
  }

 private:
  tfevo_neat_record::BredRecord* record_ = nullptr;

  std::mutex kept_mu_;
  std::vector<OutBuffers> kept_;

  struct Ctx {
    const float *nodes, *conns, *u;
    const int32_t *p1, *p2;
    const bool* elite;
    const uint32_t* words;
    int64_t W, U, P;
    int wn, wc;
    int n_in, c_in;  // row strides of the parents' tensors
    float *on, *oc;
    int fill_n, fill_c;  // NaN is written over [wn, fill_n) / [wc, fill_c) of each child
    GenomeState* st;      // per-genome bookkeeping between the phases
    const int32_t* parent_counts;  // valid node / connection rows of each parent ([2 P]), or nullptr
    std::vector<float> gm;  // marker of each distinct new pair (PairMarkers)
    // the child genome i is built in place in the first wn / wc rows of its output slice
  };

  bool Coin(const Ctx& c, int64_t i, int64_t j) const {
    return (c.words[i * c.W + (j >> 5)] >> (j & 31)) & 1u;
  }

  void PhaseA(Ctx& c, int64_t i, Scratch& sc) const {
    const int wn = c.wn, wc = c.wc;
    float* cn = c.on + i * int64_t{N_} * kD;
    float* cc = c.oc + i * int64_t{C_} * kD;
    const float* n1 = c.nodes + int64_t{c.p1[i]} * c.n_in * kD;
    const float* n2 = c.nodes + int64_t{c.p2[i]} * c.n_in * kD;
    const float* c1 = c.conns + int64_t{c.p1[i]} * c.c_in * kD;
    const float* c2 = c.conns + int64_t{c.p2[i]} * c.c_in * kD;
    if (i + kParentsAhead < c.P) {  // parents are random rows: fetch a later genome's early
      for (const int64_t p : {int64_t{c.p1[i + kParentsAhead]}, int64_t{c.p2[i + kParentsAhead]}}) {
        tfevo_prefetch::Floats(c.nodes + p * c.n_in * kD, wn * kD);
        tfevo_prefetch::Floats(c.conns + p * c.c_in * kD, wc * kD);
      }
    }
    // crossover (crossover.crossover_given): parent 1's genes, homologous
    // attributes from parent 2 where the coin is set; a homologous connection
    // disabled in either parent is disabled unless both of its last two coins are set
    std::memcpy(cn, n1, sizeof(float) * wn * kD);
    std::memcpy(cc, c1, sizeof(float) * wc * kD);
    const float* k2 = KeyColumn(n2 + NODE_KEY, wn, &sc.keys);
    for (int s = 0; s < wn; ++s) {
      const int t = FirstEqual(k2, wn, n1[s * kD + NODE_KEY]);
      if (t < 0) continue;
      for (int col = 1; col < kD; ++col)
        if (Coin(c, i, 4 * int64_t{s} + col - 1)) cn[s * kD + col] = n2[t * kD + col];
    }
    const float* m2 = KeyColumn(c2 + CONN_MARKER, wc, &sc.keys);
    for (int s = 0; s < wc; ++s) {
      const int t = FirstEqual(m2, wc, c1[s * kD + CONN_MARKER]);
      if (t < 0) continue;
      const int64_t j = 4 * int64_t{wn} + 4 * int64_t{s};
      if (Coin(c, i, j)) cc[s * kD + CONN_ENABLED] = c2[t * kD + CONN_ENABLED];
      if (Coin(c, i, j + 1)) cc[s * kD + CONN_WEIGHT] = c2[t * kD + CONN_WEIGHT];
      if ((c1[s * kD + CONN_ENABLED] == 0.f || c2[t * kD + CONN_ENABLED] == 0.f) &&
          !(Coin(c, i, j + 2) && Coin(c, i, j + 3)))
        cc[s * kD + CONN_ENABLED] = 0.f;
    }
  }

  // operators.mutate_pre's add-node decision for child i, taken from parent
  // 1's rows: crossover copies parent 1's rows and changes only attribute
  // columns (never a node key, a connection's in key or its marker), so which
  // rows of the child are valid, its free slots and the split connection's
  // marker are parent 1's.  Only a child that draws add-node (and is not an
  // elite) reads them; for the others nothing below is used.  Taking these
  // decisions before the children are built gives every new node its key
  // (a count over the genomes before it) in time for one pass per child.
  void DecideAddNode(Ctx& c, int64_t i) const {
    const int wn = c.wn, wc = c.wc;
    GenomeState& g = c.st[i];
    const bool active = !c.elite[i];
    const float* u = c.u + i * c.U;
    const bool want = active && Wants(u, 0);
    if (!want) return;
    const float* cn = c.nodes + int64_t{c.p1[i]} * c.n_in * kD;
    const float* cc = c.conns + int64_t{c.p1[i]} * c.c_in * kD;
    bool has = false;
    int nslot = -1, f1 = -1, f2 = -1, nfree = 0;
    if (c.parent_counts != nullptr) {
      // a compact parent (bred here): rows [0, count) valid, the rest not; its
      // widths are within the bred ones (used width + extra), clipped anyway
      const int kn = std::min<int>(c.parent_counts[2 * int64_t{c.p1[i]}], wn);
      const int kc = std::min<int>(c.parent_counts[2 * int64_t{c.p1[i]} + 1], wc);
      g.csel = RandomChoiceFirst(kc, u[G_SPLIT], &has);
      if (kn < wn) nslot = kn;
      nfree = wc - kc;
      if (kc < wc) f1 = kc;
      if (kc + 1 < wc) f2 = kc + 1;
    } else {
      g.csel = RandomChoice(wc, [&](int s) { return Valid(cc + s * kD); }, u[G_SPLIT], &has);
      for (int s = 0; s < wn; ++s)
        if (std::isnan(cn[s * kD + NODE_KEY])) {
          nslot = s;
          break;
        }
      for (int s = 0; s < wc; ++s)
        if (!Valid(cc + s * kD)) {
          if (f1 < 0) {
            f1 = s;
          } else if (f2 < 0) {
            f2 = s;
          }
          ++nfree;
        }
    }
    g.no_conns = !has;
    const bool has_n = nslot >= 0, has_c = nfree >= 2;
    g.nslot = has_n ? nslot : 0;
    g.c1 = f1 >= 0 ? f1 : 0;
    g.c2 = f2 >= 0 ? f2 : 0;
    bool ok = has;
    if (ok && !has_n) g.skip_n += 1;
    if (ok && has_n && !has_c) g.skip_c += 1;
    ok = ok && has_n && has_c;
    g.add_node = ok;
    if (ok && share_split_) g.split_marker = static_cast<int64_t>(cc[g.csel * kD + CONN_MARKER]);
  }

  // the output rows of genome i + 2, for writing (a kept output's rows are
  // not in the cache since the generation before)
  void PrefetchChild(const Ctx& c, int64_t i) const {
    if (i + kChildAhead >= c.P) return;
    const float* n = c.on + (i + kChildAhead) * int64_t{N_} * kD;
    const float* k = c.oc + (i + kChildAhead) * int64_t{C_} * kD;
    tfevo_prefetch::FloatsForWrite(n, c.wn * kD);
    tfevo_prefetch::FloatsForWrite(k, c.wc * kD);
  }

  void PhaseB(Ctx& c, int64_t i, int64_t next_key, int64_t next_marker, Scratch& sc) const {
    const int wn = c.wn, wc = c.wc;
    float* cn = c.on + i * int64_t{N_} * kD;
    float* cc = c.oc + i * int64_t{C_} * kD;
    GenomeState& g = c.st[i];
    const bool active = !c.elite[i];
    const float* u = c.u + i * c.U;
    const int I = I_, O = O_;
    if (g.add_node) {
      const float key = static_cast<float>(next_key + g.nid);
      const float mk1 = static_cast<float>(next_marker + 2 * g.nid);
      float split[kD];
      std::memcpy(split, cc + g.csel * kD, sizeof(split));
      const float resp = FreshAt(resp_, u[G_R1], u[G_R2], i, c.P);
      float* nr = cn + g.nslot * kD;
      nr[0] = key;
      nr[1] = 0.f;
      nr[2] = resp;
      nr[3] = agg_default_;
      nr[4] = act_default_;
      cc[g.csel * kD + CONN_ENABLED] = split[CONN_ENABLED] * 0.0f;  // the split connection is disabled
      float* r1 = cc + g.c1 * kD;
      r1[0] = split[CONN_IN];
      r1[1] = key;
      r1[2] = 1.f;
      r1[3] = 1.f;
      r1[4] = mk1;
      float* r2 = cc + g.c2 * kD;
      r2[0] = key;
      r2[1] = split[CONN_OUT];
      r2[2] = 1.f;
      r2[3] = split[CONN_WEIGHT];
      r2[4] = mk1 + 1.0f;
    }
    // delete node
    if (p_del_node_ > 0.f) {
      const bool want = active && Wants(u, 1);
      bool has = false;
      const int ns = RandomChoice(wn, [&](int s) { return s >= I + O && Valid(cn + s * kD); }, u[G_DEL_WHICH], &has);
      if (want && has) {
        const float k = cn[ns * kD + NODE_KEY];
        for (int d = 0; d < kD; ++d) cn[ns * kD + d] = kNaN;
        for (int s = 0; s < wc; ++s) {
          float* r = cc + s * kD;
          if (r[CONN_IN] == k || r[CONN_OUT] == k)
            for (int d = 0; d < kD; ++d) r[d] = kNaN;
        }
      }
    }
    // add connection: the choice (the marker comes after all genomes chose)
    // add-node on a genome without connections tries add-connection instead
    // when structural_mutation_surer holds (neat-python)
    const bool add_node_falls_back = surer_ && p_add_node_ > 0.f && active && g.no_conns && Wants(u, 0);
    if (p_add_conn_ > 0.f || add_node_falls_back) {
      bool want = active && ((p_add_conn_ > 0.f && Wants(u, 2)) || add_node_falls_back);
      bool hasa = false, hasb = false;
      const int a = RandomChoice(wn, [&](int s) { return Valid(cn + s * kD) && !(s >= I && s < I + O); },
                                 u[G_FROM], &hasa);
      const int b = RandomChoice(wn, [&](int s) { return Valid(cn + s * kD) && !(s < I); }, u[G_TO], &hasb);
      const float ka = cn[a * kD + NODE_KEY], kb = cn[b * kD + NODE_KEY];
      bool exists = false;
      for (int s = 0; s < wc; ++s) {
        const float* r = cc + s * kD;
        if (r[CONN_IN] == ka && r[CONN_OUT] == kb) exists = true;
      }
      want = want && hasb;
      if (surer_ && want) {
        for (int s = 0; s < wc; ++s) {
          float* r = cc + s * kD;
          if (r[CONN_IN] == ka && r[CONN_OUT] == kb) r[CONN_ENABLED] = 1.0f;
        }
      }
      const bool a_out = a >= I && a < I + O, b_out = b >= I && b < I + O;
      bool ok = want && !exists && !(a_out && b_out);
      if (ok && feed_forward_) ok = !Reaches(cn, cc, wn, wc, b, a, sc);
      int cslot = -1;
      for (int s = 0; s < wc; ++s)
        if (!Valid(cc + s * kD)) {
          cslot = s;
          break;
        }
      if (ok && cslot < 0) g.skip_c += 1;
      ok = ok && cslot >= 0;
      g.add_conn = ok;
      g.cslot = cslot >= 0 ? cslot : 0;
      g.ka = ka;
      g.kb = kb;
      g.hash = PairHash(ka, kb);
    }
  }

  // operators.reachable_along: whether slot `to` is reachable from slot `from`
  // along the valid connections (any enabled state).  A connection's node
  // slots are found as genome.conn_slots finds them: the slot holding its
  // key, and for a key no node has (never in a well-formed genome) the
  // reference's sorted-lookup answer (first sorted position not below the key).
  static bool Reaches(const float* cn, const float* cc, int wn, int wc, int from, int to, Scratch& sc) {
    if (from == to) return true;
    std::vector<int>& ein = sc.ein;
    std::vector<int>& eout = sc.eout;
    std::vector<char>& reach = sc.reach;
    ein.clear();
    eout.clear();
    reach.assign(wn, 0);
    const float* keys = KeyColumn(cn + NODE_KEY, wn, &sc.keys);
    for (int s = 0; s < wc; ++s) {
      const float* r = cc + s * kD;
      if (!Valid(r)) continue;
      int a = FirstEqual(keys, wn, r[CONN_IN]);
      int b = FirstEqual(keys, wn, r[CONN_OUT]);
      if (a < 0) a = SortedSlot(cn, wn, r[CONN_IN]);
      if (b < 0) b = SortedSlot(cn, wn, r[CONN_OUT]);
      ein.push_back(a);
      eout.push_back(b);
    }
    reach[from] = 1;
    bool changed = true;
    while (changed) {
      changed = false;
      for (size_t e = 0; e < ein.size(); ++e)
        if (reach[ein[e]] && !reach[eout[e]]) {
          reach[eout[e]] = 1;
          changed = true;
        }
    }
    return reach[to] != 0;
  }

  // genome.conn_slots for a key not held by any node: keys sorted (NaN as
  // +inf, stable), position of the first key not below q, clipped to wn - 1
  static int SortedSlot(const float* cn, int wn, float q) {
    std::vector<int> order(wn);
    for (int s = 0; s < wn; ++s) order[s] = s;
    auto kb = [&](int s) {
      const float k = cn[s * kD + NODE_KEY];
      return std::isnan(k) ? std::numeric_limits<float>::infinity() : k;
    };
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return kb(x) < kb(y); });
    if (std::isnan(q)) q = -1.0f;
    int pos = 0;
    while (pos < wn && kb(order[pos]) < q) ++pos;
    return order[std::min(pos, wn - 1)];
  }

  template <class Run>
  int64_t PairMarkers(Ctx& c, int64_t P, int64_t next_marker, Run& run) const {
    // distinct new pairs, ascending hash
    std::vector<int64_t> hs;
    for (int64_t i = 0; i < P; ++i)
      if (c.st[i].add_conn) hs.push_back(c.st[i].hash);
    if (hs.empty()) return next_marker;
    std::sort(hs.begin(), hs.end());
    hs.erase(std::unique(hs.begin(), hs.end()), hs.end());
    const int64_t G = static_cast<int64_t>(hs.size());
    // open-addressing table hash -> group
    int64_t cap = 16;
    while (cap < 2 * G) cap <<= 1;
    std::vector<int64_t> tkey(cap, std::numeric_limits<int64_t>::min());
    std::vector<int32_t> tval(cap, -1);
    auto mix = [cap](int64_t h) {
      uint64_t x = static_cast<uint64_t>(h) * 0x9E3779B97F4A7C15ull;
      return static_cast<int64_t>((x >> 29) & static_cast<uint64_t>(cap - 1));
    };
    for (int64_t gi = 0; gi < G; ++gi) {
      int64_t p = mix(hs[gi]);
      while (tval[p] >= 0) p = (p + 1) & (cap - 1);
      tkey[p] = hs[gi];
      tval[p] = static_cast<int32_t>(gi);
    }
    auto lookup = [&](int64_t h) -> int32_t {
      int64_t p = mix(h);
      while (tval[p] >= 0) {
        if (tkey[p] == h) return tval[p];
        p = (p + 1) & (cap - 1);
      }
      return -1;
    };
    // smallest existing marker of each new pair in any child after phase B
    // (min is exact and order-free, so the split over threads does not
    // matter).  Phase C has run already: its children hold the same (pair,
    // marker) rows except the connection it deleted (taken from the genome's
    // record) and the new connection (marker NaN until patched: never
    // smaller).  Attribute mutation and compaction leave pairs and markers.
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> mmin(G, inf);
    std::mutex mu;
    // per-generation innovations: every new pair gets a fresh marker
    if (!per_generation_) run(10 * int64_t{c.wc}, [&](int64_t b, int64_t e) {
      std::vector<float> loc(G, inf);
      bool any = false;
      auto see = [&](float in, float out, float marker) {
        const int32_t gi = lookup(PairHash(in, out));
        if (gi >= 0 && marker < loc[gi]) {
          loc[gi] = marker;
          any = true;
        }
      };
      for (int64_t i = b; i < e; ++i) {
        const GenomeState& g = c.st[i];
        const float* cc = c.oc + i * int64_t{C_} * kD;
        for (int s = 0; s < g.count_c; ++s) {  // compact: the valid rows come first
          const float* r = cc + s * kD;
          see(r[CONN_IN], r[CONN_OUT], r[CONN_MARKER]);
        }
        if (g.deleted) see(g.del_in, g.del_out, g.del_marker);
      }
      if (!any) return;
      std::lock_guard<std::mutex> lock(mu);
      for (int64_t gi = 0; gi < G; ++gi) mmin[gi] = std::min(mmin[gi], loc[gi]);
    });
    // fresh markers, ascending hash order
    std::vector<float> gm(G);
    int64_t fresh = 0;
    for (int64_t gi = 0; gi < G; ++gi) {
      if (mmin[gi] < inf) {
        gm[gi] = mmin[gi];
      } else {
        gm[gi] = static_cast<float>(next_marker + fresh);
        ++fresh;
      }
    }
    for (int64_t i = 0; i < P; ++i) {
      GenomeState& g = c.st[i];
      if (g.add_conn) g.group = lookup(g.hash);
    }
    c.gm = std::move(gm);
    return next_marker + fresh;
  }

  void PhaseC(Ctx& c, int64_t i, Scratch& sc) const {
    const int wn = c.wn, wc = c.wc;
    float* cn = c.on + i * int64_t{N_} * kD;
    float* cc = c.oc + i * int64_t{C_} * kD;
    GenomeState& g = c.st[i];
    const bool active = !c.elite[i];
    const float* u = c.u + i * c.U;
    if (g.add_conn) {
      float* r = cc + g.cslot * kD;
      r[0] = g.ka;
      r[1] = g.kb;
      r[2] = en_default_;
      r[3] = FreshAt(weight_, u[G_W1], u[G_W2], i, c.P);
      r[4] = kNaN;  // the marker, once all genomes chose (PairMarkers)
    }
    if (p_del_conn_ > 0.f && active && Wants(u, 3)) {
      bool has = false;
      const int cs = RandomChoice(wc, [&](int s) { return Valid(cc + s * kD); }, u[G_DEL_CWHICH], &has);
      if (has) {
        float* r = cc + cs * kD;
        if (g.add_conn && cs == g.cslot) {
          g.add_conn_deleted = true;
        } else {
          g.deleted = true;
          g.del_in = r[CONN_IN];
          g.del_out = r[CONN_OUT];
          g.del_marker = r[CONN_MARKER];
        }
        for (int d = 0; d < kD; ++d) r[d] = kNaN;
      }
    }
    if (g.add_conn && !g.add_conn_deleted) {  // its row after compaction (valid rows first, in order)
      int row = 0;
      for (int s = 0; s < g.cslot; ++s) row += Valid(cc + s * kD) ? 1 : 0;
      g.new_row = row;
    }
    // attribute mutation (operators._mutate_attributes_u); the normal draws
    // of a genome are made in one batch (GaussBatch) between two passes
    if (active) {
      const float* un = u + G_COLS;
      const float* uc = u + G_COLS + int64_t{wn} * kn_;
      std::vector<float>& gv = sc.gv;
      std::vector<float>& gu = sc.gu;
      std::vector<float>& gout = sc.gout;
      std::vector<float>& v01s = sc.v01s;
      std::vector<uint8_t>& gsc = sc.gsc;
      std::vector<uint8_t>& kinds = sc.kinds;
      const int maxreq = 2 * wn + wc;
      gv.resize(maxreq);
      gu.resize(maxreq);
      gout.resize(maxreq);
      gsc.resize(maxreq);
      v01s.resize(maxreq);
      kinds.resize(maxreq);
      const int64_t TN = c.P * wn, TC = c.P * wc;
      int ng = 0;
      // pass 1: decisions and the normal draws they need, in gene order
      auto decide = [&](const FloatParams& f, float r, float u2, int64_t e, int64_t T, int slot) {
        float v01 = 0.f;
        const int kind = Decide(f, r, &v01);
        kinds[slot] = static_cast<uint8_t>(kind);
        v01s[slot] = v01;
        if (NeedsGauss(f, kind)) {
          gv[ng] = v01;
          gu[ng] = u2;
          gsc[ng] = e >= T - T % 8;
          ++ng;
        }
      };
      for (int s = I_; s < wn; ++s) {
        const float* r = cn + s * kD;
        if (!Valid(r)) continue;
        const float* q = un + int64_t{s} * kn_;
        const int64_t e = i * wn + s;
        if (col_bias_ >= 0) decide(bias_, q[col_bias_], q[col_bias_ + 1], e, TN, 2 * s);
        if (col_resp_ >= 0) decide(resp_, q[col_resp_], q[col_resp_ + 1], e, TN, 2 * s + 1);
      }
      if (col_w_ >= 0)
        for (int s = 0; s < wc; ++s) {
          const float* r = cc + s * kD;
          if (!Valid(r)) continue;
          const float* q = uc + int64_t{s} * kc_;
          decide(weight_, q[col_w_], q[col_w_ + 1], i * wc + s, TC, 2 * wn + s);
        }
      GaussBatch(gv.data(), gu.data(), gsc.data(), ng, gout.data());
      // pass 2: apply, consuming the draws in the same order
      int k = 0;
      auto apply = [&](const FloatParams& f, float v, int slot) {
        const int kind = kinds[slot];
        const float g = NeedsGauss(f, kind) ? gout[k++] : 0.f;
        return Apply(f, kind, v, v01s[slot], g);
      };
      for (int s = I_; s < wn; ++s) {
        float* r = cn + s * kD;
        if (!Valid(r)) continue;
        const float* q = un + int64_t{s} * kn_;
        if (col_bias_ >= 0) r[NODE_BIAS] = apply(bias_, r[NODE_BIAS], 2 * s);
        if (col_resp_ >= 0) r[NODE_RESPONSE] = apply(resp_, r[NODE_RESPONSE], 2 * s + 1);
        if (col_act_ >= 0) r[NODE_ACT] = Choice(r[NODE_ACT], act_ids_, act_rate_, act_inv_, q[col_act_]);
        if (col_agg_ >= 0) r[NODE_AGG] = Choice(r[NODE_AGG], agg_ids_, agg_rate_, agg_inv_, q[col_agg_]);
      }
      for (int s = 0; s < wc; ++s) {
        float* r = cc + s * kD;
        if (!Valid(r)) continue;
        const float* q = uc + int64_t{s} * kc_;
        if (col_w_ >= 0) r[CONN_WEIGHT] = apply(weight_, r[CONN_WEIGHT], 2 * wn + s);
        if (col_en_ >= 0) {  // the rate of the current state (neat-python's rate_to_*_add)
          const bool on = r[CONN_ENABLED] != 0.f;
          if (q[col_en_] < (on ? en_rate_ : en_rate_off_)) {
            r[CONN_ENABLED] = q[col_en_] < (on ? en_half_ : en_half_off_) ? 1.0f : 0.0f;
          }
        }
      }
    }
    g.count_n = Compact(cn, wn, c.fill_n);
    g.count_c = Compact(cc, wc, c.fill_c);
  }

  // operators._mutate_choice: r < rate picks option floor(r / rate * k)
  static float Choice(float v, const std::vector<float>& ids, float rate, float inv, float r) {
    if (!(r < rate)) return v;
    const int k = static_cast<int>(ids.size());
    const float x = r * inv;  // Grappler's form of r / rate
    const float y = x * static_cast<float>(k);
    int pick = static_cast<int>(y);
    if (pick > k - 1) pick = k - 1;
    return ids[pick];
  }

  // operators.compact: valid rows first (order kept), then the other rows of
  // the used range, then NaN rows up to the full width (written up to row
  // `fill`: the rows past it are NaN already).  Returns the valid row count.
  static int Compact(float* x, int w, int fill) {
    int lead = 0;  // genomes are mostly compact already: valid rows first
    while (lead < w && Valid(x + lead * kD)) ++lead;
    int s = lead;
    while (s < w && !Valid(x + s * kD)) ++s;
    if (s == w) {  // nothing to move
      std::fill(x + int64_t{w} * kD, x + int64_t{fill} * kD, kNaN);
      return lead;
    }
    float tmp[64 * kD];
    std::vector<float> big;
    float* buf = tmp;
    if (w > 64) {
      big.resize(static_cast<size_t>(w) * kD);
      buf = big.data();
    }
    int n = 0;
    for (int s = 0; s < w; ++s)
      if (Valid(x + s * kD)) std::memcpy(buf + (n++) * kD, x + s * kD, sizeof(float) * kD);
    const int cnt = n;
    for (int s = 0; s < w; ++s)
      if (!Valid(x + s * kD)) std::memcpy(buf + (n++) * kD, x + s * kD, sizeof(float) * kD);
    std::memcpy(x, buf, sizeof(float) * w * kD);
    std::fill(x + int64_t{w} * kD, x + int64_t{fill} * kD, kNaN);
    return cnt;
  }

  int N_, C_, I_, O_;
  bool feed_forward_, surer_, share_split_;
  float p_add_node_, p_del_node_, p_add_conn_, p_del_conn_;
  bool single_ = false;
  bool per_generation_ = true;
  float probs_[4] = {0.f, 0.f, 0.f, 0.f}, cuts_[4] = {0.f, 0.f, 0.f, 0.f};

  // Whether structural mutation k (0 add node, 1 delete node, 2 add
  // connection, 3 delete connection) is drawn for a child with uniforms u
  // (mutation.structural_wants): each from its own uniform, or with
  // single_structural the one whose interval holds the add-node uniform.
  bool Wants(const float* u, int k) const {
    if (single_) {
      const float r = u[G_ADD_NODE];
      return (k == 0 || r >= cuts_[k - 1]) && r < cuts_[k];
    }
    static constexpr int kCol[4] = {G_ADD_NODE, G_DEL_NODE, G_ADD_CONN, G_DEL_CONN};
    return u[kCol[k]] < probs_[k];
  }
  float agg_default_, act_default_, en_default_;
  FloatParams bias_, resp_, weight_;
  std::vector<float> act_ids_, agg_ids_;
  float act_rate_, agg_rate_, en_rate_, en_half_, act_inv_, agg_inv_, en_rate_off_, en_half_off_;
  int kn_, col_bias_, col_resp_, col_act_, col_agg_, kc_, col_w_, col_en_;
};

// (wn, wc) = min(used + extra, width) and the shapes of the random draws
// for that range (crossover words, mutation uniforms).
void BredShapes(int64_t P, const int64_t used[2], const int64_t width[2], int64_t node_extra, int64_t conn_extra,
                int64_t kn, int64_t kc, Tensor* out, Tensor* ws, Tensor* us) {
  const int64_t wn = std::min(used[0] + node_extra, width[0]), wc = std::min(used[1] + conn_extra, width[1]);
  out->flat<int32_t>()(0) = static_cast<int32_t>(wn);
  out->flat<int32_t>()(1) = static_cast<int32_t>(wc);
  ws->flat<int32_t>()(0) = static_cast<int32_t>(P);
  ws->flat<int32_t>()(1) = static_cast<int32_t>((4 * wn + 4 * wc + 31) / 32);
  us->flat<int32_t>()(0) = static_cast<int32_t>(P);
  us->flat<int32_t>()(1) = static_cast<int32_t>(G_COLS + wn * kn + wc * kc);
}

// operators.used_width + extra, clipped to the width, for nodes and
// connections.  Genomes are kept compact, so each row is scanned from its end
// down to the widest slot found so far only.
class NeatBreedWidthsOp : public OpKernel {
 public:
  explicit NeatBreedWidthsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("node_extra", &node_extra_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("conn_extra", &conn_extra_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("kn", &kn_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("kc", &kc_));
  }

  void Compute(OpKernelContext* ctx) override {
    Tensor *out = nullptr, *ws = nullptr, *us = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({2}), &out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({2}), &ws));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({2}), &us));
    int64_t used_k[2], width_k[2];
    for (int k = 0; k < 2; ++k) {
      const Tensor& t = ctx->input(k);
      OP_REQUIRES(ctx, t.dims() == 3 && t.dim_size(2) == kD,
                  tensorflow::errors::InvalidArgument("TfevoNeatBreedWidths: inputs must be [P, K, 5], got ",
                                                      t.shape().DebugString()));
      const int64_t P = t.dim_size(0), K = t.dim_size(1);
      const float* x = t.flat<float>().data();
      int64_t used = 0;
      for (int64_t i = 0; i < P && used < K; ++i) {
        const float* row = x + i * K * kD;
        for (int64_t s = K - 1; s >= used; --s)
          if (Valid(row + s * kD)) {
            used = s + 1;
            break;
          }
      }
      used_k[k] = used;
      width_k[k] = K;
    }
    BredShapes(ctx->input(0).dim_size(0), used_k, width_k, node_extra_, conn_extra_, kn_, kc_, out, ws, us);
  }

 private:
  int64_t node_extra_, conn_extra_, kn_, kc_;
};

class NeatBreedShapesOp : public OpKernel {
 public:
  explicit NeatBreedShapesOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("node_width", &width_[0]));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("conn_width", &width_[1]));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("pop_size", &P_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("node_extra", &node_extra_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("conn_extra", &conn_extra_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("kn", &kn_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("kc", &kc_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& used_t = ctx->input(0);
    OP_REQUIRES(ctx, used_t.NumElements() == 2,
                tensorflow::errors::InvalidArgument("TfevoNeatBreedShapes: used must be [2], got ",
                                                    used_t.shape().DebugString()));
    int64_t used[2];
    for (int k = 0; k < 2; ++k) {
      used[k] = used_t.flat<int32_t>()(k);
      OP_REQUIRES(ctx, used[k] >= 0 && used[k] <= width_[k],
                  tensorflow::errors::InvalidArgument("TfevoNeatBreedShapes: used[", k, "] = ", used[k],
                                                      " outside [0, ", width_[k], "]"));
    }
    Tensor *out = nullptr, *ws = nullptr, *us = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({2}), &out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({2}), &ws));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({2}), &us));
    BredShapes(P_, used, width_, node_extra_, conn_extra_, kn_, kc_, out, ws, us);
  }

 private:
  int64_t width_[2], P_, node_extra_, conn_extra_, kn_, kc_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfevoNeatBreed").Device(DEVICE_CPU), NeatBreedOp);
REGISTER_KERNEL_BUILDER(Name("TfevoNeatBreedWidths").Device(DEVICE_CPU), NeatBreedWidthsOp);
REGISTER_KERNEL_BUILDER(Name("TfevoNeatBreedShapes").Device(DEVICE_CPU), NeatBreedShapesOp);

}  // namespace tfevo_neat_breed
