// What handing work to the CPU pool's threads costs (engine/core/parallel.h): jobs of two parts, each
// part W microseconds of busy work, the jobs 10 us apart as a training step's kernels are, timed per
// job for W = 0, 5, 20, 50 and 200 us; the ideal is W (both parts at once). The program runs itself
// again with GPULAB_SPIN_US=0 -- the pool's threads sleeping between jobs instead of spinning for a
// while -- and prints both, and what the spinning saves a job.
// Run: build/bin/gpulab-bench-parallel   (OMP_NUM_THREADS=2 unless it is set; the pool needs 2 threads)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/core/parallel.h"

namespace {

using Clock = std::chrono::steady_clock;

// Busy work for `us` microseconds (a loop that reads the clock: the same time on any CPU).
void busy(int us) {
  const auto until = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < until) {
  }
}

const std::vector<int> kPartMicros = {0, 5, 20, 50, 200};
constexpr int kJobs = 2000, kGapMicros = 10;

// Microseconds a job, the gap taken out, for each part length: the median of five batches of kJobs.
std::map<int, double> measure() {
  std::map<int, double> out;
  for (int w : kPartMicros) {
    std::vector<double> batches;
    for (int b = 0; b < 5; ++b) {
      const auto t0 = Clock::now();
      for (int j = 0; j < kJobs; ++j) {
        gpulab::parallelFor(2, 1, [&](int, std::int64_t, std::int64_t) { busy(w); });
        busy(kGapMicros);
      }
      batches.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kJobs - kGapMicros);
    }
    std::sort(batches.begin(), batches.end());
    out[w] = batches[2];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("OMP_NUM_THREADS", "2", 0);
  if (argc > 1 && std::strcmp(argv[1], "--measure") == 0) {  // the child: one policy, one line a part length
    for (const auto& [w, us] : measure()) std::printf("%d %.3f\n", w, us);
    return 0;
  }
  if (gpulab::numThreads() < 2) {
    std::fprintf(stderr, "gpulab-bench-parallel: the pool needs 2 threads (OMP_NUM_THREADS=%d)\n", gpulab::numThreads());
    return 2;
  }
  std::map<int, double> spinning = measure();
  std::map<int, double> sleeping;
  const std::string child = "GPULAB_SPIN_US=0 '" + std::string(argv[0]) + "' --measure";
  if (FILE* p = popen(child.c_str(), "r")) {
    int w = 0;
    double us = 0;
    while (std::fscanf(p, "%d %lf", &w, &us) == 2) sleeping[w] = us;
    pclose(p);
  }
  if (sleeping.size() != spinning.size()) {
    std::fprintf(stderr, "gpulab-bench-parallel: the run with GPULAB_SPIN_US=0 (%s) gave no numbers\n", child.c_str());
    return 1;
  }
  const char* spin = std::getenv("GPULAB_SPIN_US");
  std::printf("a job of two parts on %d threads, jobs %d us apart (median of 5 x %d jobs); ideal: one part's time\n",
              gpulab::numThreads(), kGapMicros, kJobs);
  std::printf("part (us) | threads sleep between jobs (us/job) | threads spin first, up to %s (us/job) | saved a job\n",
              spin ? (std::string(spin) + " us").c_str() : "100 us, the default");
  for (int w : kPartMicros) {
    std::printf("%9d | %35.1f | %40.1f | %.1f us (%.2fx)\n", w, sleeping[w], spinning[w], sleeping[w] - spinning[w],
                sleeping[w] / std::max(spinning[w], 1e-3));
  }
  return 0;
}
