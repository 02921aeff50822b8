#pragma once
// A seeded random generator, as torch.Generator. It hands out ranges of counters for the
// counter-based random functions in engine/kernels/functors.h, so a seed fixes every random number
// drawn through it, on the CPU and on the GPU alike.
#include <atomic>
#include <cstdint>

namespace gpulab {

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}
  Generator(const Generator& other) : seed_(other.seed_), offset_(other.offset_.load()) {}
  void manual_seed(std::uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  std::uint64_t seed() const { return seed_; }
  // Reserves `count` counters; returns the first.
  std::uint64_t advance(std::uint64_t count) { return offset_.fetch_add(count); }

 private:
  std::uint64_t seed_;
  std::atomic<std::uint64_t> offset_{0};
};

// The process-wide default generator (torch.manual_seed seeds it).
Generator& defaultGenerator();
void manual_seed(std::uint64_t seed);

}  // namespace gpulab
