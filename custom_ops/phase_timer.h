// Optional per-phase wall times of a kernel, for profiling: with the
// environment variable TFEVO_KERNEL_PHASES set, each Compute prints one line
// "<kernel> <phase>=<ms> ..." to stderr.  Off (one branch per mark) otherwise.
#ifndef TFEVO_CUSTOM_OPS_PHASE_TIMER_H_
#define TFEVO_CUSTOM_OPS_PHASE_TIMER_H_

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tfevo_timing {

inline bool PhasesOn() {
  static const bool on = [] {
    const char* v = std::getenv("TFEVO_KERNEL_PHASES");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

class PhaseTimer {
 public:
  explicit PhaseTimer(const char* kernel) : on_(PhasesOn()) {
    if (on_) {
      line_ = kernel;
      t_ = std::chrono::steady_clock::now();
    }
  }
  // Closes the phase that started at the previous mark (or construction).
  void Mark(const char* phase) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s=%.3f", phase, std::chrono::duration<double, std::milli>(now - t_).count());
    line_ += buf;
    t_ = now;
  }
  ~PhaseTimer() {
    if (on_) std::fprintf(stderr, "%s\n", line_.c_str());
  }

 private:
  bool on_;
  std::string line_;
  std::chrono::steady_clock::time_point t_;
};

}  // namespace tfevo_timing

#endif  // TFEVO_CUSTOM_OPS_PHASE_TIMER_H_
