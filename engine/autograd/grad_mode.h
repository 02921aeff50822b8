#pragma once
// Grad mode, as torch.no_grad(): while a NoGradGuard lives on this thread, ops record no graph, so
// intermediate activations are freed as soon as they are no longer used (evaluation allocates less).
namespace gpulab {

bool isGradEnabled();
void setGradEnabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(isGradEnabled()) { setGradEnabled(false); }
  ~NoGradGuard() { setGradEnabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace gpulab
