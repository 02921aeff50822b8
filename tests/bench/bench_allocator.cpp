// Allocation benchmark: the median cost of an allocate+free pair served from the caching allocator's
// cache (the target: at most 1 microsecond), next to glibc's malloc+free of the same sizes.
// Run: build/bin/gpulab-bench-alloc
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/runtime/device_memory.h"

namespace {

void* volatile gEscape = nullptr;  // keeps the compiler from eliding the malloc/free pair

using Clock = std::chrono::steady_clock;

template <class F>
double medianNanosPerPair(F&& pair, int rounds = 51, int perRound = 20000) {
  std::vector<double> samples;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < perRound; ++i) pair(i);
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / perRound);
  }
  std::nth_element(samples.begin(), samples.begin() + rounds / 2, samples.end());
  return samples[static_cast<std::size_t>(rounds / 2)];
}

}  // namespace

int main() {
  gpulab::CachingAllocator& cpu = gpulab::allocatorFor(gpulab::kCPU);
  const std::size_t sizes[] = {256, 4096, 65536, 1 << 20, 8 << 20};
  // Keep one block of each size alive elsewhere in the pools so the benchmark is not a lone block.
  std::vector<void*> keep;
  for (std::size_t s : sizes) keep.push_back(cpu.allocate(s));
  std::printf("%-10s %18s %18s %8s\n", "size", "cached alloc+free", "malloc+free", "ratio");
  double worst = 0;
  for (std::size_t s : sizes) {
    cpu.free(cpu.allocate(s));  // warm: the block is now cached
    const double ours = medianNanosPerPair([&](int) { cpu.free(cpu.allocate(s)); });
    const double libc = medianNanosPerPair([&](int) {
      void* p = std::malloc(s);
      gEscape = p;
      std::free(p);
    });
    worst = std::max(worst, ours);
    std::printf("%-10zu %15.1f ns %15.1f ns %7.2fx\n", s, ours, libc, ours / libc);
  }
  for (void* p : keep) cpu.free(p);
  std::printf("worst median allocate+free from the cache: %.1f ns (target: <= 1000 ns) -> %s\n", worst, worst <= 1000 ? "OK" : "TOO SLOW");
  return worst <= 1000 ? 0 : 1;
}
