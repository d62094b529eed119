// What the NEAT breed kernel knows about the population buffers it keeps:
// for each kept output (a [P, K, 5] nodes or connections tensor), the row
// count `width` past which every genome's rows are NaN (all five columns).
//
// The speciation and forward kernels look their input up here and read only
// the first `width` rows of each genome instead of all K.  This is sound
// because the breed kernel holds a reference to every buffer it records:
// TensorFlow writes a buffer in place only when its reference count is 1, so
// a recorded buffer cannot change, and the breed kernel itself writes one
// again only after erasing its record (nobody else references it then), and
// erases a record before letting go of the buffer (so its address is never
// reused while recorded).  A tensor is recognised by its data pointer and its
// full shape (a slice starting at the same address has another shape).
//
// The record is one resource of the device's ResourceMgr, shared by the
// kernels of the three libraries (each loaded on its own; the class is
// defined here once, inline, and looked up by name).
#ifndef TFEVO_CUSTOM_OPS_NEAT_BRED_RECORD_H_
#define TFEVO_CUSTOM_OPS_NEAT_BRED_RECORD_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfevo_neat_record {

class BredRecord : public ::tensorflow::ResourceBase {
 public:
  std::string DebugString() const override { return "TfevoNeatBredRecord"; }

  void Set(const ::tensorflow::Tensor& t, int64_t width) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Entry& e : entries_)
      if (e.data == t.data()) {
        e = Entry{t.data(), t.dim_size(0), t.dim_size(1), width};
        return;
      }
    entries_.push_back(Entry{t.data(), t.dim_size(0), t.dim_size(1), width});
  }

  void Erase(const ::tensorflow::Tensor& t) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t k = 0; k < entries_.size(); ++k)
      if (entries_[k].data == t.data()) {
        entries_.erase(entries_.begin() + k);
        return;
      }
  }

  // Rows of `t` ([P, K, 5]) past which every genome is NaN: the recorded
  // width, or K for a tensor not recorded.
  int64_t Width(const ::tensorflow::Tensor& t) {
    const int64_t K = t.dims() == 3 ? t.dim_size(1) : 0;
    if (t.dims() != 3 || t.NumElements() == 0) return K;
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_)
      if (e.data == t.data() && e.P == t.dim_size(0) && e.K == K) return e.width < K ? e.width : K;
    return K;
  }

 private:
  struct Entry {
    const void* data;
    int64_t P, K, width;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
};

// The device's record (created on first use), with a reference the caller
// releases with Unref(); nullptr if the device has no resource manager.
inline BredRecord* Lookup(::tensorflow::OpKernelConstruction* ctx) {
  ::tensorflow::ResourceMgr* rm = ctx->resource_manager();
  if (rm == nullptr) return nullptr;
  BredRecord* r = nullptr;
  const auto st = rm->LookupOrCreate<BredRecord>("tfevo_neat", "bred_record", &r, [](BredRecord** out) {
    *out = new BredRecord();
    return ::tensorflow::Status();
  });
  return st.ok() ? r : nullptr;
}

}  // namespace tfevo_neat_record

#endif  // TFEVO_CUSTOM_OPS_NEAT_BRED_RECORD_H_
