// TfevoNeatSpeciate: NEAT's speciation step in one CPU kernel.
//
// Computes exactly what the pure-TensorFlow reference
// tfevo.neat._speciate_op.speciate_reference returns, from the same inputs:
//
//   1. Each live species, in species-key order, takes as its new
//      representative the genome (not yet taken) closest to its old
//      representative; a species with nothing left dies.
//   2. Every genome's closest new representative (ties: lowest species slot).
//   3. Founders, in population order: a genome that is not a representative
//      and whose closest distance is >= threshold founds a species in the
//      first free slot; only genomes after it compare themselves with it
//      (strictly closer wins).  Stops when no candidate or no free slot is
//      left; the remaining genomes keep their closest species.
//
// Compatibility distance (neat-python): node part + connection part, each
//   (weight_coeff * sum of homologous gene distances
//    + disjoint_coeff * #non-homologous genes) / max(#genes, #genes, 1);
// node gene: |dbias| + |dresponse| + [aggregation differs] + [activation
// differs]; connection: |dweight| + [enabled differs]; input slots are not
// genes; connection part 0 when neither genome has connections.  Homologous
// genes are found by id (node key / connection (in, out) key pair, as
// neat-python's DefaultGenome.distance; not the marker) in a hash of the
// representatives' ids, and one table row holds that gene's attributes in
// every representative, so one lookup per gene serves all representatives.
//
// Float arithmetic follows the reference operation by operation: the gene
// distance is summed in the genome's slot order starting from 0 (the
// reference sums with a cumulative sum along the slot axis, which TensorFlow
// evaluates sequentially), the final formula is evaluated with the same
// operations in the same order, and the two products are kept out of fused
// multiply-adds (the reference evaluates them as separate ops).  Distances,
// and so all decisions, are bit-identical.
//
// Parallelism: every distance pass is split over genomes on TensorFlow's
// intra-op pool; each genome's results depend on that genome only, so the
// output does not depend on the number of threads.  The sequential parts
// (representative picks, founders) are O(live species x P) and O(P) scans.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "neat_bred_record.h"
#include "phase_timer.h"
#include "prefetch.h"

namespace tfevo_neat_speciate {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfevoNeatSpeciate")
    .Input("nodes: float")           // [P, N, 5] key, bias, response, aggregation, activation
    .Input("conns: float")           // [P, C, 5] in, out, enabled, weight, marker
    .Input("rep_nodes: float")       // [S, Nr, 5] old representatives
    .Input("rep_conns: float")       // [S, Cr, 5]
    .Input("active: bool")           // [S]
    .Input("keys: int64")            // [S]
    .Input("created: int64")         // [S]
    .Input("best_fitness: T")        // [S]
    .Input("last_improved: int64")   // [S]
    .Input("next_key: int64")        // []
    .Input("generation: int64")      // []
    .Attr("num_inputs: int >= 0")
    .Attr("threshold: float")
    .Attr("disjoint_coefficient: float")
    .Attr("weight_coefficient: float")
    // distances in double (neat-python's arithmetic) from the genomes' float values; the
    // threshold and coefficients are then the float64 values whose bits these attrs hold
    .Attr("double_distances: bool = false")
    .Attr("threshold_bits: int = 0")
    .Attr("disjoint_coefficient_bits: int = 0")
    .Attr("weight_coefficient_bits: int = 0")
    .Attr("T: {float, double} = DT_FLOAT")  // the fitness type (fitness_dtype)
    .Output("species: int32")        // [P]
    .Output("alive: bool")           // [S]
    .Output("keys_out: int64")       // [S]
    .Output("created_out: int64")    // [S]
    .Output("best_fitness_out: T")   // [S]
    .Output("last_improved_out: int64")  // [S]
    .Output("next_key_out: int64")   // []
    .Output("rep_index: int32")      // [S] representative genome per species, -1 if dead
    // [2] 1 + the last valid node / connection slot of any genome (row key not NaN; 0 if none):
    // TfevoNeatBreedWidths's scan, done here in the pass that reads every row anyway
    .Output("used: int32")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle nodes, active;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &nodes));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 1, &active));
      auto P = c->Dim(nodes, 0);
      auto S = c->Dim(active, 0);
      c->set_output(0, c->Vector(P));
      for (int i = 1; i <= 5; ++i) c->set_output(i, c->Vector(S));
      c->set_output(6, c->Scalar());
      c->set_output(7, c->Vector(S));
      c->set_output(8, c->Vector(2));
      return Status();
    })
    .Doc(R"doc(
NEAT speciation (representatives, closest species, founders in population order).
)doc");


REGISTER_OP("TfevoNeatPlan")
    .Input("species: int32")         // [P] species slot per genome
    .Input("alive: bool")            // [S] live after speciation
    .Input("keys: int64")            // [S]
    .Input("best_fitness: T")        // [S]
    .Input("last_improved: int64")   // [S]
    .Input("fitness: T")             // [P] finite (worst -> finite)
    .Input("member_key: int64")      // [P] genome ids (newer = larger)
    .Input("generation: int64")      // []
    .Input("uniforms: float")        // [P, 5] parent-choice uniforms
    .Attr("species_fitness: {'max', 'min', 'mean', 'median', 'median2'}")
    .Attr("max_stagnation: int")
    .Attr("species_elitism: int")
    .Attr("reset_on_extinction: bool")
    .Attr("min_size: int")
    .Attr("rank_allotment: bool")
    .Attr("change_rate: float")
    .Attr("elitism: int")
    .Attr("survival_threshold_bits: int")  // the float64 threshold's bits: neat-python's double ceil
    .Attr("crossover_prob: float")
    // fitness_dtype="float64": the fitness, species fitness and compute_spawn arithmetic in double
    // (as neat-python), with spawn_number_change_rate as its float64 bits
    .Attr("T: {float, double} = DT_FLOAT")
    .Attr("change_rate_bits: int = 0")
    .Output("size: int32")           // [S]
    .Output("alive_out: bool")       // [S] after stagnation
    .Output("species_fitness_out: T")  // [S]
    .Output("best_fitness_out: T")     // [S]
    .Output("last_improved_out: int64")    // [S]
    .Output("extinct: bool")         // []
    .Output("spawn: int32")          // [S]
    .Output("parent1: int32")        // [P]
    .Output("parent2: int32")        // [P]
    .Output("is_elite: bool")        // [P]
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle sp, alive;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &sp));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &alive));
      auto P = c->Dim(sp, 0);
      auto S = c->Dim(alive, 0);
      for (int i = 0; i < 5; ++i) c->set_output(i, c->Vector(S));
      c->set_output(5, c->Scalar());
      c->set_output(6, c->Vector(S));
      for (int i = 7; i < 10; ++i) c->set_output(i, c->Vector(P));
      return Status();
    })
    .Doc(R"doc(
NEAT after speciation: species sizes and fitness, stagnation, offspring
allotment (neat-python's compute_spawn and exact adjustment), parents.
)doc");

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kHighest = std::numeric_limits<float>::max();

// Keeps a product out of a fused multiply-add (the reference rounds it alone);
// T is float or double.
template <typename T>
inline T Rounded(T x) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(x));
#elif defined(__aarch64__)
  __asm__("" : "+w"(x));
#else
  volatile T v = x;
  x = v;
#endif
  return x;
}

// A genome's genes in slot order: node genes (slots >= num_inputs with a
// key) as (key, bias, response, aggregation, activation) rows, connection
// genes (in and out keys set) as (in, out, enabled, weight) rows.
//
// Layout: genomes are packed in fixed blocks of kBlock consecutive genomes;
// inside a block the genomes' genes follow each other with no gaps (offsets
// noff/coff), so a distance pass reads one short contiguous run per block
// instead of one cache line per genome scattered over max_nodes x max_conns
// rows.  The block split is fixed, so offsets (and results) do not depend
// on the thread count.  The storage only grows, so a kernel that keeps one
// Packed across calls touches no fresh pages (at pop 10000 fresh buffers
// cost more page faults than the whole distance work).
constexpr int64_t kBlock = 64;

struct Packed {
  int64_t ncap = 0, ccap = 0;
  std::vector<float> node_, conn_;  // per block kBlock * ncap * 5, kBlock * ccap * 4 floats
  float* node = nullptr;
  float* conn = nullptr;
  std::vector<int64_t> noff, coff;  // first float of genome g's node / connection genes
  std::vector<int32_t> nn, nc;      // node / connection genes per genome (lookups)
  std::vector<float> na, ca;        // gene counts of the formula (valid key / valid in-key)

  void Init(int64_t g, int64_t n, int64_t c) {
    ncap = std::max<int64_t>(n, 1);
    ccap = std::max<int64_t>(c, 1);
    const int64_t blocks = (g + kBlock - 1) / kBlock;
    if (static_cast<int64_t>(node_.size()) < blocks * kBlock * ncap * 5) node_.resize(blocks * kBlock * ncap * 5);
    if (static_cast<int64_t>(conn_.size()) < blocks * kBlock * ccap * 4) conn_.resize(blocks * kBlock * ccap * 4);
    node = node_.data();
    conn = conn_.data();
    noff.resize(g);
    coff.resize(g);
    nn.resize(g);
    nc.resize(g);
    na.resize(g);
    ca.resize(g);
  }
  const float* Node(int64_t g) const { return node + noff[g]; }
  const float* Conn(int64_t g) const { return conn + coff[g]; }
  // Offsets where block b's first genome goes.
  int64_t NodeBase(int64_t b) const { return b * kBlock * ncap * 5; }
  int64_t ConnBase(int64_t b) const { return b * kBlock * ccap * 4; }
};

// Packs genome `src` of nodes [*, N, 5] / conns [*, C, 5] as genome g of pk at
// the offsets *no / *co (floats), which advance past its genes.
// With `used` (2 ints), also stores 1 + the genome's last valid node / connection slot.
// Rows from wn / wc on (default: none) are known to be NaN and are not read.
inline void PackOne(const float* nodes, int64_t N, const float* conns, int64_t C, int64_t I, int64_t src,
                    int64_t g, Packed* pk, int64_t* no_, int64_t* co_, int32_t* used = nullptr,
                    int64_t wn = -1, int64_t wc = -1) {
  const int64_t nend = wn < 0 ? N : wn, cend = wc < 0 ? C : wc;
  const float* nr = nodes + src * N * 5;
  pk->noff[g] = *no_;
  float* no = pk->node + *no_;
  int32_t k = 0;
  int64_t last_n = 0, last_c = 0;
  for (int64_t j = 0; j < std::min(I, nend); ++j)
    if (!std::isnan(nr[j * 5])) last_n = j + 1;
  for (int64_t j = I; j < nend; ++j) {
    const float* r = nr + j * 5;
    if (std::isnan(r[0])) continue;
    std::memcpy(no + 5 * k, r, 5 * sizeof(float));
    ++k;
    last_n = j + 1;
  }
  pk->nn[g] = k;
  pk->na[g] = static_cast<float>(k);
  *no_ += 5 * k;
  const float* cr = conns + src * C * 5;
  pk->coff[g] = *co_;
  float* co = pk->conn + *co_;
  int32_t m = 0, valid = 0;
  for (int64_t j = 0; j < cend; ++j) {
    const float* r = cr + j * 5;
    valid += !std::isnan(r[0]);
    if (!std::isnan(r[0])) last_c = j + 1;
    if (std::isnan(r[0]) || std::isnan(r[1])) continue;
    co[4 * m] = r[0];
    co[4 * m + 1] = r[1];
    co[4 * m + 2] = r[2];
    co[4 * m + 3] = r[3];
    ++m;
  }
  pk->nc[g] = m;
  pk->ca[g] = static_cast<float>(valid);
  *co_ += 4 * m;
  if (used != nullptr) {
    used[0] = static_cast<int32_t>(last_n);
    used[1] = static_cast<int32_t>(last_c);
  }
}

// The rows PackOne reads of genome g, into the cache: genomes are a few
// cache lines each, one every N * 20 bytes, a stride the hardware prefetcher
// does not follow (the population was written by breeding and has left the
// cache since).
constexpr int64_t kPackAhead = 4;
inline void PrefetchRows(const float* nodes, int64_t N, const float* conns, int64_t C, int64_t g, int64_t wn,
                         int64_t wc) {
  tfevo_prefetch::Floats(nodes + g * N * 5, wn * 5);
  tfevo_prefetch::Floats(conns + g * C * 5, wc * 5);
}

// Bits of a gene id float (-0 read as +0), so equal ids have equal bits.
inline uint64_t IdBits(float id) {
  if (id == 0.f) id = 0.f;
  uint32_t b;
  std::memcpy(&b, &id, 4);
  return b;
}
inline uint64_t NodeId(const float* row) { return IdBits(row[0]); }
inline uint64_t PairId(const float* row) { return (IdBits(row[0]) << 32) | IdBits(row[1]); }

// Open-addressing hash: gene id (exact 64-bit key) -> table row.
class IdHash {
 public:
  void Reset(int64_t expected) {
    int64_t cap = 16;
    while (cap < 2 * expected) cap <<= 1;
    mask_ = cap - 1;
    keys_.assign(cap, 0);
    rows_.assign(cap, -1);
    size_ = 0;
  }
  int32_t Find(uint64_t id) const {
    for (int64_t h = Mix(id) & mask_;; h = (h + 1) & mask_) {
      const int32_t r = rows_[h];
      if (r < 0) return -1;
      if (keys_[h] == id) return r;
    }
  }
  int32_t Insert(uint64_t id) {  // row of id, new rows numbered 0, 1, ...
    for (int64_t h = Mix(id) & mask_;; h = (h + 1) & mask_) {
      if (rows_[h] < 0) {
        keys_[h] = id;
        rows_[h] = size_;
        return size_++;
      }
      if (keys_[h] == id) return rows_[h];
    }
  }
  int32_t size() const { return size_; }

 private:
  static uint64_t Mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
  }
  int64_t mask_ = 15;
  std::vector<uint64_t> keys_;
  std::vector<int32_t> rows_;
  int32_t size_ = 0;
};

// The attributes of R representatives by gene id: row = id, column = rep.
struct RepTable {
  int64_t R = 0;
  IdHash nid, cid;
  std::vector<float> nb, nr, nagg, nact, npres;  // [rows, R]
  std::vector<float> cen, cw, cpres;             // [rows, R]
  std::vector<float> na, ca;                     // [R] gene counts

  // reps: genome indices into `pk`
  void Build(const Packed& pk, const int32_t* reps, int64_t count) {
    R = count;
    int64_t tn = 0, tc = 0;
    for (int64_t s = 0; s < R; ++s) {
      tn += pk.nn[reps[s]];
      tc += pk.nc[reps[s]];
    }
    nid.Reset(tn);
    cid.Reset(tc);
    na.resize(R);
    ca.resize(R);
    for (int64_t s = 0; s < R; ++s) {
      const int32_t g = reps[s];
      const float* n = pk.Node(g);
      for (int32_t k = 0; k < pk.nn[g]; ++k) nid.Insert(NodeId(n + 5 * k));
      const float* c = pk.Conn(g);
      for (int32_t k = 0; k < pk.nc[g]; ++k) cid.Insert(PairId(c + 4 * k));
      na[s] = pk.na[g];
      ca[s] = pk.ca[g];
    }
    const int64_t rn = nid.size(), rc = cid.size();
    for (auto* v : {&nb, &nr, &nagg, &nact, &npres}) v->assign(rn * R, 0.f);
    for (auto* v : {&cen, &cw, &cpres}) v->assign(rc * R, 0.f);
    for (int64_t s = 0; s < R; ++s) {
      const int32_t g = reps[s];
      const float* n = pk.Node(g);
      for (int32_t k = 0; k < pk.nn[g]; ++k) {
        const int64_t at = nid.Find(NodeId(n + 5 * k)) * R + s;
        nb[at] = n[5 * k + 1];
        nr[at] = n[5 * k + 2];
        nagg[at] = n[5 * k + 3];
        nact[at] = n[5 * k + 4];
        npres[at] = std::isnan(n[5 * k + 1]) ? 0.f : 1.f;  // reference: homologous iff the bias is not NaN
      }
      const float* c = pk.Conn(g);
      for (int32_t k = 0; k < pk.nc[g]; ++k) {
        const int64_t at = cid.Find(PairId(c + 4 * k)) * R + s;
        cen[at] = c[4 * k + 2];
        cw[at] = c[4 * k + 3];
        cpres[at] = std::isnan(c[4 * k + 3]) ? 0.f : 1.f;  // ... iff the weight is not NaN
      }
    }
  }
};

template <typename D>
struct Coeffs {
  D dc, wc;
};

// Distances of genome g of `pk` to all R representatives of `t` -> out[R],
// computed in D (float, or double from the float gene values).
// acc: scratch of 4 R values.
template <typename D>
inline void Distances(const Packed& pk, int64_t g, const RepTable& t, const Coeffs<D>& k, D* acc, D* out) {
  const int64_t R = t.R;
  D* hn = acc;
  D* mn = acc + R;
  D* hc = acc + 2 * R;
  D* mc = acc + 3 * R;
  std::fill(acc, acc + 4 * R, D(0));
  const float* n = pk.Node(g);
  for (int32_t q = 0; q < pk.nn[g]; ++q) {
    const float* x = n + 5 * q;
    const int32_t row = t.nid.Find(NodeId(x));
    if (row < 0) continue;
    const D b = x[1], r = x[2], ag = x[3], ac = x[4];
    const float* tb = t.nb.data() + row * R;
    const float* tr = t.nr.data() + row * R;
    const float* tg = t.nagg.data() + row * R;
    const float* ta = t.nact.data() + row * R;
    const float* tp = t.npres.data() + row * R;
    for (int64_t s = 0; s < R; ++s) {
      const D d = ((std::fabs(b - D(tb[s])) + std::fabs(r - D(tr[s]))) + (std::fabs(ag - D(tg[s])) > D(0) ? D(1) : D(0))) +
                  (std::fabs(ac - D(ta[s])) > D(0) ? D(1) : D(0));
      hn[s] += tp[s] != 0.f ? d : D(0);
      mn[s] += D(tp[s]);
    }
  }
  const float* c = pk.Conn(g);
  for (int32_t q = 0; q < pk.nc[g]; ++q) {
    const float* x = c + 4 * q;
    const int32_t row = t.cid.Find(PairId(x));
    if (row < 0) continue;
    const D en = x[2], w = x[3];
    const float* te = t.cen.data() + row * R;
    const float* tw = t.cw.data() + row * R;
    const float* tp = t.cpres.data() + row * R;
    for (int64_t s = 0; s < R; ++s) {
      const D d = std::fabs(w - D(tw[s])) + (std::fabs(en - D(te[s])) > D(0.5) ? D(1) : D(0));
      hc[s] += tp[s] != 0.f ? d : D(0);
      mc[s] += D(tp[s]);
    }
  }
  const D na = pk.na[g], ca = pk.ca[g];
  for (int64_t s = 0; s < R; ++s) {
    const D nb = t.na[s], cb = t.ca[s];
    const D nd = (Rounded(k.wc * hn[s]) + Rounded(k.dc * ((na + nb) - Rounded(D(2) * mn[s])))) /
                 std::max(std::max(na, nb), D(1));
    D cd = (Rounded(k.wc * hc[s]) + Rounded(k.dc * ((ca + cb) - Rounded(D(2) * mc[s])))) /
           std::max(std::max(ca, cb), D(1));
    if (!((ca + cb) > D(0))) cd = D(0);
    out[s] = nd + cd;
  }
}

class NeatSpeciateOp : public OpKernel {
 public:
  explicit NeatSpeciateOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_inputs", &num_inputs_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threshold", &threshold_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("disjoint_coefficient", &coeffs_.dc));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_coefficient", &coeffs_.wc));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("double_distances", &double_));
    int64_t bits[3];
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threshold_bits", &bits[0]));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("disjoint_coefficient_bits", &bits[1]));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_coefficient_bits", &bits[2]));
    double v[3];
    std::memcpy(v, bits, sizeof(v));
    threshold64_ = v[0];
    coeffs64_ = {v[1], v[2]};
    record_ = tfevo_neat_record::Lookup(ctx);
  }

  void Compute(OpKernelContext* ctx) override {
    tfevo_timing::PhaseTimer timer("TfevoNeatSpeciate");
    const Tensor& nodes_t = ctx->input(0);
    const Tensor& conns_t = ctx->input(1);
    const Tensor& rn_t = ctx->input(2);
    const Tensor& rc_t = ctx->input(3);
    namespace errors = ::tensorflow::errors;
    OP_REQUIRES(ctx, nodes_t.dims() == 3 && nodes_t.dim_size(2) == 5,
                errors::InvalidArgument("TfevoNeatSpeciate: nodes must be [P, N, 5], got ",
                                        nodes_t.shape().DebugString()));
    const int64_t P = nodes_t.dim_size(0), N = nodes_t.dim_size(1);
    OP_REQUIRES(ctx, conns_t.dims() == 3 && conns_t.dim_size(0) == P && conns_t.dim_size(2) == 5,
                errors::InvalidArgument("TfevoNeatSpeciate: conns must be [P, C, 5] with P = ", P, ", got ",
                                        conns_t.shape().DebugString()));
    const int64_t C = conns_t.dim_size(1);
    const int64_t S = ctx->input(4).NumElements();
    OP_REQUIRES(ctx, rn_t.dims() == 3 && rn_t.dim_size(0) == S && rn_t.dim_size(2) == 5,
                errors::InvalidArgument("TfevoNeatSpeciate: rep_nodes must be [S, N, 5] with S = ", S, ", got ",
                                        rn_t.shape().DebugString()));
    OP_REQUIRES(ctx, rc_t.dims() == 3 && rc_t.dim_size(0) == S && rc_t.dim_size(2) == 5,
                errors::InvalidArgument("TfevoNeatSpeciate: rep_conns must be [S, C, 5] with S = ", S, ", got ",
                                        rc_t.shape().DebugString()));
    for (int i = 5; i <= 8; ++i)
      OP_REQUIRES(ctx, ctx->input(i).NumElements() == S,
                  errors::InvalidArgument("TfevoNeatSpeciate: input ", i, " must have ", S, " elements"));
    OP_REQUIRES(ctx, ctx->input(9).NumElements() == 1 && ctx->input(10).NumElements() == 1,
                errors::InvalidArgument("TfevoNeatSpeciate: next_key and generation must be scalars"));
    const int64_t Nr = rn_t.dim_size(1), Cr = rc_t.dim_size(1);
    const int64_t I = std::min<int64_t>(num_inputs_, std::min(N, Nr));

    // outputs (species state starts as a copy of the inputs)
    Tensor *sp_t, *alive_t, *keys_t, *created_t, *bestf_t, *lastimp_t, *nkey_t, *rep_t, *used_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({P}), &sp_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({S}), &alive_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({S}), &keys_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({S}), &created_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({S}), &bestf_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(5, TensorShape({S}), &lastimp_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(6, TensorShape({}), &nkey_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(7, TensorShape({S}), &rep_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(8, TensorShape({2}), &used_t));
    const bool* active = ctx->input(4).flat<bool>().data();
    int64_t* keys = keys_t->flat<int64_t>().data();
    int64_t* created = created_t->flat<int64_t>().data();
    const bool f64 = ctx->input(7).dtype() == ::tensorflow::DT_DOUBLE;
    int64_t* last_imp = lastimp_t->flat<int64_t>().data();
    std::memcpy(keys, ctx->input(5).flat<int64_t>().data(), S * sizeof(int64_t));
    std::memcpy(created, ctx->input(6).flat<int64_t>().data(), S * sizeof(int64_t));
    std::memcpy(const_cast<char*>(bestf_t->tensor_data().data()), ctx->input(7).tensor_data().data(),
                ctx->input(7).tensor_data().size());
    auto set_worst = [&](int64_t s) {  // a new species' best fitness: -inf
      if (f64) bestf_t->flat<double>()(s) = -std::numeric_limits<double>::infinity();
      else bestf_t->flat<float>()(s) = -kInf;
    };
    std::memcpy(last_imp, ctx->input(8).flat<int64_t>().data(), S * sizeof(int64_t));
    int64_t nkey = ctx->input(9).scalar<int64_t>()();
    const int64_t gen = ctx->input(10).scalar<int64_t>()();
    int32_t* sp = sp_t->flat<int32_t>().data();
    bool* alive = alive_t->flat<bool>().data();
    int32_t* rep_idx = rep_t->flat<int32_t>().data();

    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    auto shard = [&](int64_t total, int64_t cost, const std::function<void(int64_t, int64_t)>& fn) {
      tensorflow::Shard(pool->num_threads, pool->workers, total, cost, fn);
    };

    // the distance type: float, or double with the float64 threshold and coefficients
    // 1) live species in key order take the closest free genome.  The old
    // representatives' table is built first, so one parallel sweep packs
    // each genome (genes in slot order, into the kept buffers) and computes
    // its distances to the old representatives while its genes are in cache.
    auto run = [&](auto zero, const auto& coeffs, const auto thr) {
      using DT = decltype(zero);
      constexpr DT inf = std::numeric_limits<DT>::infinity();
      constexpr DT highest = std::numeric_limits<DT>::max();
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<int32_t> live;
      for (int64_t s = 0; s < S; ++s)
        if (active[s]) live.push_back(static_cast<int32_t>(s));
      std::stable_sort(live.begin(), live.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
      const int64_t L = live.size();
      for (int64_t s = 0; s < S; ++s) rep_idx[s] = -1;
      std::vector<char> taken(P, 0);
      RepTable old_t;
      Packed old;
      if (L > 0) {
        old.Init(L, std::max<int64_t>(Nr - I, 0), Cr);
        const float* rn = rn_t.flat<float>().data();
        const float* rc = rc_t.flat<float>().data();
        int64_t no = 0, co = 0;  // packed one after the other (Init sized for L genomes)
        for (int64_t i = 0; i < L; ++i) PackOne(rn, Nr, rc, Cr, I, live[i], i, &old, &no, &co);
        std::vector<int32_t> idx(L);
        for (int64_t i = 0; i < L; ++i) idx[i] = static_cast<int32_t>(i);
        old_t.Build(old, idx.data(), L);  // the old representatives; the population is the query side
      }
      Packed& pop = pop_;
      pop.Init(P, std::max<int64_t>(N - I, 0), C);
      const float* nodes = nodes_t.flat<float>().data();
      const float* conns = conns_t.flat<float>().data();
      const int64_t nblocks = (P + kBlock - 1) / kBlock;
      // a population the breed kernel made: its rows past the bred widths are NaN (neat_bred_record.h)
      const int64_t wn = record_ != nullptr ? record_->Width(nodes_t) : N;
      const int64_t wc = record_ != nullptr ? record_->Width(conns_t) : C;
      std::vector<DT> D(L * P);  // [L, P]
      std::vector<int32_t> used(2 * P);  // per genome (max over genomes below: independent of the split)
      shard(nblocks, kBlock * (20 * (N + C) + 40 * L * 8), [&](int64_t bb, int64_t be) {
        std::vector<DT> acc(4 * L), out(L);
        for (int64_t blk = bb; blk < be; ++blk) {
          int64_t no = pop.NodeBase(blk), co = pop.ConnBase(blk);
          for (int64_t g = blk * kBlock; g < std::min(P, (blk + 1) * kBlock); ++g) {
            if (g + kPackAhead < std::min(P, be * kBlock)) PrefetchRows(nodes, N, conns, C, g + kPackAhead, wn, wc);
            PackOne(nodes, N, conns, C, I, g, g, &pop, &no, &co, used.data() + 2 * g, wn, wc);
            if (L == 0) continue;
            Distances(pop, g, old_t, coeffs, acc.data(), out.data());
            for (int64_t i = 0; i < L; ++i) D[i * P + g] = out[i];
          }
        }
      });
      for (int64_t i = 0; i < L; ++i) {
        const DT* d = D.data() + i * P;
        int64_t j = 0;
        DT m = highest;
        for (int64_t p = 0; p < P; ++p) {
          const DT v = taken[p] ? inf : d[p];
          if (v < m) {
            m = v;
            j = p;
          }
        }
        const DT dj = taken[j] ? inf : d[j];
        if (dj < inf) {
          rep_idx[live[i]] = static_cast<int32_t>(j);
          taken[j] = 1;
        }
      }
      for (int64_t s = 0; s < S; ++s) alive[s] = rep_idx[s] >= 0;
      int32_t used_n = 0, used_c = 0;
      for (int64_t g = 0; g < P; ++g) {
        used_n = std::max(used_n, used[2 * g]);
        used_c = std::max(used_c, used[2 * g + 1]);
      }
      used_t->flat<int32_t>()(0) = used_n;
      used_t->flat<int32_t>()(1) = used_c;
      timer.Mark(wn < N || wc < C ? "pack+old_reps(bred widths)" : "pack+old_reps");

      // 2) closest new representative of every genome (ties: the lowest species
      // key, as neat-python's min over its species in key order; a species'
      // slot says nothing about its age)
      std::vector<int32_t> ids, reps;
      for (int64_t s = 0; s < S; ++s)
        if (alive[s]) ids.push_back(static_cast<int32_t>(s));
      std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
      for (int32_t s : ids) reps.push_back(rep_idx[s]);
      const int64_t A = ids.size();
      std::vector<DT> best_d(P, inf);
      std::vector<int32_t> best_s(P, -1);
      if (A > 0) {
        RepTable t;
        t.Build(pop, reps.data(), A);
        shard(P, 40 * A * (N + C), [&](int64_t b, int64_t e) {
          std::vector<DT> acc(4 * A), out(A);
          for (int64_t g = b; g < e; ++g) {
            Distances(pop, g, t, coeffs, acc.data(), out.data());
            DT m = inf, am = highest;
            int64_t k = 0;
            for (int64_t i = 0; i < A; ++i) {
              m = std::min(m, out[i]);
              if (out[i] < am) {
                am = out[i];
                k = i;
              }
            }
            best_d[g] = m;
            best_s[g] = ids[k];
          }
        });
      }

      timer.Mark("closest");
      // 3) founders in population order
      int64_t last = -1;
      for (;;) {
        int64_t f = -1;
        for (int64_t p = last + 1; p < P; ++p)
          if (!taken[p] && best_d[p] >= thr) {
            f = p;
            break;
          }
        int64_t s = -1;
        for (int64_t q = 0; q < S; ++q)
          if (!alive[q]) {
            s = q;
            break;
          }
        if (f < 0 || s < 0) break;
        RepTable t;
        const int32_t fr = static_cast<int32_t>(f);
        t.Build(pop, &fr, 1);
        const int32_t s32 = static_cast<int32_t>(s);
        shard(P - f - 1, 40 * (N + C), [&](int64_t b, int64_t e) {
          DT acc[4], out[1];
          for (int64_t g = f + 1 + b; g < f + 1 + e; ++g) {
            Distances(pop, g, t, coeffs, acc, out);
            if (out[0] < best_d[g]) {
              best_d[g] = out[0];
              best_s[g] = s32;
            }
          }
        });
        best_s[f] = s32;
        taken[f] = 1;
        alive[s] = true;
        rep_idx[s] = fr;
        keys[s] = nkey;
        created[s] = gen;
        set_worst(s);
        last_imp[s] = gen;
        ++nkey;
        last = f;
      }

      timer.Mark("founders");
      // members: own species for representatives, else the closest
      for (int64_t p = 0; p < P; ++p) sp[p] = std::max(best_s[p], 0);
      for (int64_t s = 0; s < S; ++s)
        if (alive[s]) sp[rep_idx[s]] = static_cast<int32_t>(s);
      nkey_t->scalar<int64_t>()() = nkey;
    };
    if (double_) run(double(0), coeffs64_, threshold64_);
    else run(float(0), coeffs_, threshold_);
  }

 private:
  int64_t num_inputs_;
  float threshold_;
  Coeffs<float> coeffs_;
  bool double_ = false;
  double threshold64_ = 0;
  Coeffs<double> coeffs64_{0, 0};
  std::mutex mu_;  // guards pop_ (concurrent calls of this kernel run one at a time)
  Packed pop_;
  tfevo_neat_record::BredRecord* record_ = nullptr;

 public:
  ~NeatSpeciateOp() override {
    if (record_ != nullptr) record_->Unref();
  }
};


// Stable ranks: rank[i] = position of i when sorting by `less` (ties by index).
template <typename Less>
std::vector<int32_t> StableOrder(int64_t n, Less less) {
  std::vector<int32_t> o(n);
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int32_t>(i);
  std::stable_sort(o.begin(), o.end(), less);
  return o;
}

template <typename Less>
std::vector<int32_t> StableRank(int64_t n, Less less) {
  std::vector<int32_t> o = StableOrder(n, less), r(n);
  for (int64_t i = 0; i < n; ++i) r[o[i]] = static_cast<int32_t>(i);
  return r;
}

// One stable counting-sort pass of `idx` by an 11-bit digit of key(i).
template <class Key>
void RadixPass(std::vector<int32_t>* idx, std::vector<int32_t>* tmp, int shift, Key key) {
  constexpr int kBits = 11, kBuckets = 1 << kBits;
  std::vector<int32_t> count(kBuckets + 1, 0);
  for (const int32_t i : *idx) ++count[((key(i) >> shift) & (kBuckets - 1)) + 1];
  for (int b = 0; b < kBuckets; ++b) count[b + 1] += count[b];
  for (const int32_t i : *idx) (*tmp)[count[(key(i) >> shift) & (kBuckets - 1)]++] = i;
  idx->swap(*tmp);
}

// Members by (species ascending, fitness descending, genome id descending,
// index ascending): what a stable sort by those keys gives, as least-
// significant-digit radix passes (genome id, then fitness, then species;
// each pass stable).  A comparison sort of P random fitness values is bound
// by branch mispredictions; these passes are a few linear sweeps.
// Fitness descending as an unsigned key: the float's or double's order-preserving bits,
// complemented (-0 read as +0: they compare equal).
inline uint64_t DescendingKey(float f) {
  if (f == 0.f) f = 0.f;
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ~b;
}
inline uint64_t DescendingKey(double f) {
  if (f == 0.0) f = 0.0;
  uint64_t b;
  std::memcpy(&b, &f, 8);
  b = (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
  return ~b;
}

template <typename T>
std::vector<int32_t> MemberOrder(int64_t P, const int32_t* sp, const T* ff, const int64_t* mkey,
                                 const std::vector<int32_t>& start) {
  std::vector<int32_t> idx(P), tmp(P);
  for (int64_t p = 0; p < P; ++p) idx[p] = static_cast<int32_t>(p);
  if (P == 0) return idx;
  // genome id descending = (max id - id) ascending, in as many digits as its range needs
  const int64_t mk_max = *std::max_element(mkey, mkey + P), mk_min = *std::min_element(mkey, mkey + P);
  const uint64_t range = static_cast<uint64_t>(mk_max) - static_cast<uint64_t>(mk_min);
  for (int shift = 0; shift < 64 && (range >> shift) != 0; shift += 11)
    RadixPass(&idx, &tmp, shift, [&](int32_t i) { return static_cast<uint64_t>(mk_max) - static_cast<uint64_t>(mkey[i]); });
  // fitness descending
  auto fkey = [&](int32_t i) -> uint64_t { return DescendingKey(ff[i]); };
  for (int shift = 0; shift < static_cast<int>(8 * sizeof(T)); shift += 11) RadixPass(&idx, &tmp, shift, fkey);
  // species ascending (one counting pass into the species ranges)
  std::vector<int32_t> fill(start);
  for (const int32_t i : idx) tmp[fill[sp[i]]++] = i;
  return tmp;
}

template <typename T>
class NeatPlanOp : public OpKernel {
  static constexpr T kInf = std::numeric_limits<T>::infinity();
  static constexpr T kHighest = std::numeric_limits<T>::max();

 public:
  explicit NeatPlanOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string f;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("species_fitness", &f));
    fitness_func_ = f == "max" ? 0 : f == "min" ? 1 : f == "mean" ? 2 : f == "median" ? 3 : 4;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_stagnation", &max_stagnation_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("species_elitism", &species_elitism_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reset_on_extinction", &reset_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("min_size", &min_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rank_allotment", &rank_allot_));
    float rate32 = 0.f;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("change_rate", &rate32));
    rate_ = rate32;
    if (sizeof(T) == 8) {  // double: the rate's float64 bits (0: the float attr)
      int64_t rate_bits = 0;
      OP_REQUIRES_OK(ctx, ctx->GetAttr("change_rate_bits", &rate_bits));
      double r64;
      std::memcpy(&r64, &rate_bits, 8);
      if (rate_bits != 0) rate_ = static_cast<T>(r64);
    }
    OP_REQUIRES_OK(ctx, ctx->GetAttr("elitism", &elitism_));
    int64_t survival_bits = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("survival_threshold_bits", &survival_bits));
    std::memcpy(&survival_, &survival_bits, sizeof(survival_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("crossover_prob", &crossover_));
  }

  void Compute(OpKernelContext* ctx) override {
    namespace errors = ::tensorflow::errors;
    const int64_t P = ctx->input(0).NumElements();
    const int64_t S = ctx->input(1).NumElements();
    for (int i : {2, 3, 4})
      OP_REQUIRES(ctx, ctx->input(i).NumElements() == S,
                  errors::InvalidArgument("TfevoNeatPlan: input ", i, " must have ", S, " elements"));
    for (int i : {5, 6})
      OP_REQUIRES(ctx, ctx->input(i).NumElements() == P,
                  errors::InvalidArgument("TfevoNeatPlan: input ", i, " must have ", P, " elements"));
    OP_REQUIRES(ctx, ctx->input(7).NumElements() == 1,
                errors::InvalidArgument("TfevoNeatPlan: generation must be a scalar"));
    OP_REQUIRES(ctx, ctx->input(8).dims() == 2 && ctx->input(8).dim_size(0) == P && ctx->input(8).dim_size(1) == 5,
                errors::InvalidArgument("TfevoNeatPlan: uniforms must be [P, 5], got ",
                                        ctx->input(8).shape().DebugString()));
    OP_REQUIRES(ctx, P > 0 && S > 0, errors::InvalidArgument("TfevoNeatPlan: empty population or species"));
    const int32_t* sp = ctx->input(0).flat<int32_t>().data();
    const bool* alive_in = ctx->input(1).flat<bool>().data();
    const int64_t* keys = ctx->input(2).flat<int64_t>().data();
    const T* ff = ctx->input(5).flat<T>().data();
    const int64_t* mkey = ctx->input(6).flat<int64_t>().data();
    const int64_t gen = ctx->input(7).scalar<int64_t>()();
    const float* u = ctx->input(8).flat<float>().data();
    tfevo_timing::PhaseTimer timer("TfevoNeatPlan");
    for (int64_t p = 0; p < P; ++p)
      OP_REQUIRES(ctx, sp[p] >= 0 && sp[p] < S,
                  errors::InvalidArgument("TfevoNeatPlan: species id ", sp[p], " out of [0, ", S, ")"));
    Tensor *size_t_, *alive_t, *fit_t, *bestf_t, *last_t, *ext_t, *spawn_t, *p1_t, *p2_t, *el_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({S}), &size_t_));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({S}), &alive_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({S}), &fit_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({S}), &bestf_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({S}), &last_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(5, TensorShape({}), &ext_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(6, TensorShape({S}), &spawn_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(7, TensorShape({P}), &p1_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(8, TensorShape({P}), &p2_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(9, TensorShape({P}), &el_t));
    int32_t* size = size_t_->flat<int32_t>().data();
    bool* alive = alive_t->flat<bool>().data();
    T* fit = fit_t->flat<T>().data();
    T* best_f = bestf_t->flat<T>().data();
    int64_t* last_imp = last_t->flat<int64_t>().data();
    int32_t* spawn = spawn_t->flat<int32_t>().data();
    int32_t* p1 = p1_t->flat<int32_t>().data();
    int32_t* p2 = p2_t->flat<int32_t>().data();
    bool* is_elite = el_t->flat<bool>().data();
    std::memcpy(best_f, ctx->input(3).flat<T>().data(), S * sizeof(T));
    std::memcpy(last_imp, ctx->input(4).flat<int64_t>().data(), S * sizeof(int64_t));

    // species sizes, sums (population order), members grouped by species
    std::vector<T> sum(S, T(0)), mx(S, -kHighest), mn(S, kHighest);
    std::fill(size, size + S, 0);
    for (int64_t p = 0; p < P; ++p) {
      const int32_t s = sp[p];
      ++size[s];
      sum[s] += ff[p];
      mx[s] = std::max(mx[s], ff[p]);
      mn[s] = std::min(mn[s], ff[p]);
    }
    std::vector<T> mean(S);
    for (int64_t s = 0; s < S; ++s) {
      alive[s] = alive_in[s] && size[s] > 0;
      mean[s] = sum[s] / static_cast<T>(std::max(size[s], 1));
    }
    std::vector<int32_t> start(S, 0);
    for (int64_t s = 1; s < S; ++s) start[s] = start[s - 1] + size[s - 1];
    timer.Mark("sums");
    // members by (species, fitness descending, genome id descending, index)
    const std::vector<int32_t> order = MemberOrder(P, sp, ff, mkey, start);
    for (int64_t s = 0; s < S; ++s) {
      T f;
      switch (fitness_func_) {
        case 0: f = mx[s]; break;
        case 1: f = mn[s]; break;
        case 2: f = mean[s]; break;
        default: {  // members' fitness ascending = reversed order
          const int32_t n = size[s];
          if (n == 0) { f = T(0); break; }
          const int32_t lo = (n - 1) / 2, hi = n / 2;  // ascending positions
          const T b = ff[order[start[s] + n - 1 - hi]];
          if (fitness_func_ == 3) {  // median: the upper middle value (neat-python's math_util.median)
            f = b;
          } else {  // median2: the mean of the two middle values
            f = T(0.5) * (ff[order[start[s] + n - 1 - lo]] + b);
          }
        }
      }
      fit[s] = alive[s] ? f : -kInf;
      if (alive[s] && fit[s] > best_f[s]) {
        last_imp[s] = gen;
        best_f[s] = fit[s];
      }
    }
    timer.Mark("sort");
    // stagnation (the best species_elitism species are protected; among equal
    // fitness the newer species, larger key, ranks higher: neat-python sorts
    // by fitness in key order and protects the last ones)
    const std::vector<int32_t> rank = StableRank(
        S, [&](int32_t a, int32_t b) { return fit[a] > fit[b] || (fit[a] == fit[b] && keys[a] > keys[b]); });
    std::vector<char> stagnant(S);
    bool extinct = true;
    for (int64_t s = 0; s < S; ++s) {
      stagnant[s] = alive[s] && (gen - last_imp[s]) >= max_stagnation_ && !(rank[s] < species_elitism_);
      extinct = extinct && (stagnant[s] || !alive[s]);
    }
    for (int64_t s = 0; s < S; ++s) {
      if (reset_) stagnant[s] = stagnant[s] && !extinct;
      else stagnant[s] = stagnant[s] && !(extinct && rank[s] == 0);
      alive[s] = alive[s] && !stagnant[s];
    }
    if (!reset_) extinct = false;
    ext_t->scalar<bool>()() = extinct;
    // adjusted fitness (range of the surviving members)
    T fmin = kInf, fmax = -kInf;
    for (int64_t p = 0; p < P; ++p)
      if (alive[sp[p]]) {
        fmin = std::min(fmin, ff[p]);
        fmax = std::max(fmax, ff[p]);
      }
    const T frange = std::max(T(1), fmax - fmin);
    const std::vector<int32_t> arank =
        StableRank(S, [&](int32_t a, int32_t b) { return (alive[a] ? -fit[a] : kInf) < (alive[b] ? -fit[b] : kInf); });
    // offspring per species: compute_spawn
    const T min_size = static_cast<T>(min_size_);
    int32_t n_alive = 0;
    for (int64_t s = 0; s < S; ++s) n_alive += alive[s];
    std::vector<T> share(S);
    T tot = T(0);
    for (int64_t s = 0; s < S; ++s) {
      share[s] = !alive[s] ? T(0)
                 : rank_allot_ ? static_cast<T>(n_alive) - static_cast<T>(arank[s])
                               : (mean[s] - fmin) / frange;
      tot += share[s];
    }
    const T Pf = static_cast<T>(P);
    std::vector<T> sf(S);
    T total = T(0);
    for (int64_t s = 0; s < S; ++s) {
      const T target = tot > T(0) ? std::max(min_size, (share[s] / std::max(tot, Tiny())) * Pf) : min_size;
      const T prev = static_cast<T>(size[s]);
      const T d = Rounded((target - prev) * rate_);
      const T c = std::nearbyint(d);
      const T sg = d > T(0) ? T(1) : (d < T(0) ? T(-1) : T(0));
      sf[s] = alive[s] ? prev + (std::fabs(c) > T(0) ? c : sg) : T(0);
      total += sf[s];
    }
    int32_t spawn_sum = 0;
    for (int64_t s = 0; s < S; ++s) {
      spawn[s] = alive[s] ? static_cast<int32_t>(
                                std::max(min_size, std::nearbyint(Rounded(sf[s] * Pf) / std::max(total, T(1)))))
                          : 0;
      spawn_sum += spawn[s];
    }
    // exact adjustment: species order = fitness ascending, then key
    const std::vector<int32_t> so = StableOrder(S, [&](int32_t a, int32_t b) {
      const T fa = alive[a] ? fit[a] : kInf, fb = alive[b] ? fit[b] : kInf;
      if (fa != fb) return fa < fb;
      const int64_t ka = alive[a] ? keys[a] : std::numeric_limits<int64_t>::max();
      const int64_t kb = alive[b] ? keys[b] : std::numeric_limits<int64_t>::max();
      return ka < kb;
    });
    std::vector<int32_t> pos(S);
    for (int64_t i = 0; i < S; ++i) pos[so[i]] = static_cast<int32_t>(i);
    const int32_t n = std::max(n_alive, 1);
    const int32_t diff = static_cast<int32_t>(P) - spawn_sum;
    const int32_t kMax = std::numeric_limits<int32_t>::max();
    const int32_t Si = static_cast<int32_t>(S), mins = static_cast<int32_t>(min_size_);
    if (diff > 0) {
      std::vector<int32_t> key(S);
      for (int64_t s = 0; s < S; ++s) key[s] = alive[s] ? spawn[s] * Si + pos[s] : kMax;
      const std::vector<int32_t> q = StableRank(S, [&](int32_t a, int32_t b) { return key[a] < key[b]; });
      for (int64_t s = 0; s < S; ++s)
        if (alive[s]) spawn[s] += diff / n + (q[s] < diff % n ? 1 : 0);
    } else if (diff < 0) {
      int32_t rem = -diff;
      std::vector<int32_t> key(S);
      for (int64_t it = 0; it < P; ++it) {
        bool any = false;
        for (int64_t s = 0; s < S; ++s) any = any || (alive[s] && spawn[s] > mins);
        if (!(rem > 0 && any)) break;
        for (int64_t s = 0; s < S; ++s) key[s] = (alive[s] && spawn[s] > mins) ? -spawn[s] * Si + pos[s] : kMax;
        const std::vector<int32_t> q = StableRank(S, [&](int32_t a, int32_t b) { return key[a] < key[b]; });
        int32_t took = 0;
        for (int64_t s = 0; s < S; ++s)
          if (alive[s] && spawn[s] > mins && q[s] < rem) {
            --spawn[s];
            ++took;
          }
        rem -= took;
      }
    }
    timer.Mark("spawn");
    // children: species by cumulative spawn, elites first, parents from the survivors
    std::vector<int32_t> cum(S);
    int32_t acc = 0;
    for (int64_t s = 0; s < S; ++s) cum[s] = (acc += spawn[s]);
    std::vector<int32_t> kk(S);
    for (int64_t s = 0; s < S; ++s) {
      const int32_t surv = static_cast<int32_t>(std::ceil(survival_ * static_cast<double>(size[s])));
      kk[s] = std::max(std::min(size[s], std::max(surv, 2)), 1);
    }
    auto at = [&](int64_t i) { return order[std::min<int64_t>(std::max<int64_t>(i, 0), P - 1)]; };
    // the children are drawn in blocks per species (slot order), then laid out
    // in neat-python's genome-id order (below)
    std::vector<int32_t> q1(P), q2(P), first(S, -1), last(S, -1);
    std::vector<char> qel(P);
    int64_t c = 0;
    for (int64_t i = 0; i < P; ++i) {
      while (c < S && cum[c] <= i) ++c;
      const int64_t cs = std::min<int64_t>(c, S - 1);
      if (first[cs] < 0) first[cs] = static_cast<int32_t>(i);
      last[cs] = static_cast<int32_t>(i);
      const int64_t j = i - (cum[cs] - spawn[cs]);
      const bool el = j < std::min(size[cs], static_cast<int32_t>(elitism_));
      const int32_t kc = kk[cs];
      const float kf = static_cast<float>(kc);
      const int32_t r1 = std::min(static_cast<int32_t>(Rounded(u[5 * i] * kf)), kc - 1);
      const int32_t r2 = std::min(static_cast<int32_t>(Rounded(u[5 * i + 1] * kf)), kc - 1);
      int32_t a = at(start[cs] + (el ? j : r1));
      int32_t b = at(start[cs] + r2);
      if (crossover_ < 1.f && !(u[5 * i + 4] < crossover_)) b = a;
      if (el) b = a;
      if (ff[b] > ff[a]) std::swap(a, b);
      q1[i] = a;
      q2[i] = b;
      qel[i] = el;
    }
    // neat-python's genome-id order: the elites (they keep their ids) by id, then
    // the new children species by species in its species order (fitness
    // ascending, then key), each species' children in turn; speciation visits
    // the population in this order, as neat-python visits it by genome id
    std::vector<std::pair<int64_t, int32_t>> elites;
    for (int64_t i = 0; i < P; ++i)
      if (qel[i]) elites.emplace_back(mkey[q1[i]], static_cast<int32_t>(i));
    std::sort(elites.begin(), elites.end());
    int64_t w = 0;
    auto put = [&](int32_t i) {
      p1[w] = q1[i];
      p2[w] = q2[i];
      is_elite[w] = qel[i];
      ++w;
    };
    for (const auto& e : elites) put(e.second);
    for (int64_t k = 0; k < S; ++k) {
      const int32_t sk = so[k];
      if (first[sk] < 0) continue;
      for (int32_t i = first[sk]; i <= last[sk]; ++i)
        if (!qel[i]) put(i);
    }
    timer.Mark("parents");
  }

 private:
  // tf.maximum(tot, 1e-12) of the reference in T
  static T Tiny() { return sizeof(T) == 8 ? static_cast<T>(1e-12) : static_cast<T>(1e-12f); }

  int fitness_func_;
  int64_t max_stagnation_, species_elitism_, min_size_, elitism_;
  bool reset_, rank_allot_;
  T rate_;
  float crossover_;
  double survival_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfevoNeatSpeciate").Device(DEVICE_CPU), NeatSpeciateOp);
REGISTER_KERNEL_BUILDER(Name("TfevoNeatPlan").Device(DEVICE_CPU).TypeConstraint<float>("T"), NeatPlanOp<float>);
REGISTER_KERNEL_BUILDER(Name("TfevoNeatPlan").Device(DEVICE_CPU).TypeConstraint<double>("T"), NeatPlanOp<double>);

}  // namespace tfevo_neat_speciate
