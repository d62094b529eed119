// Locks on resource variables for the ops that update several variables in place
// (sep_cma.cc, normal.cc, sym_eig.cc).
#ifndef TFEVO_CUSTOM_OPS_VAR_LOCKS_H_
#define TFEVO_CUSTOM_OPS_VAR_LOCKS_H_

#include <algorithm>
#include <vector>

#include "tensorflow/core/framework/resource_var.h"

namespace tfevo_vars {

// Holds the locks of a set of variables for a scope.  They are taken in
// address order (a variable named twice is locked once), so two ops that lock
// overlapping sets can never deadlock, and released in reverse order.
class VarLocks {
 public:
  explicit VarLocks(std::vector<tensorflow::Var*> vars) : vars_(std::move(vars)) {
    std::sort(vars_.begin(), vars_.end());
    vars_.erase(std::unique(vars_.begin(), vars_.end()), vars_.end());
    for (auto* v : vars_) v->mu()->lock();
  }
  ~VarLocks() {
    for (auto it = vars_.rbegin(); it != vars_.rend(); ++it) (*it)->mu()->unlock();
  }
  VarLocks(const VarLocks&) = delete;
  VarLocks& operator=(const VarLocks&) = delete;

 private:
  std::vector<tensorflow::Var*> vars_;
};

}  // namespace tfevo_vars

#endif  // TFEVO_CUSTOM_OPS_VAR_LOCKS_H_
