#pragma once
// The CPU backend's threads: one pool of workers that the kernels split their work over, as ATen's
// at::parallel_for does -- the batch of a convolution, the columns of a GEMM, the channels of a batch
// norm, the planes of a pool, the elements of a long elementwise op.
//
// Why the engine's own pool, and OpenBLAS single-threaded: OpenBLAS's threads only ever run its GEMMs,
// and between two GEMMs they spin (sched_yield) for a while before sleeping. On a laptop's hyperthreads
// the spinning takes the core from the thread that runs everything else -- a third of a CNN step here
// went to it -- and im2col, pools, norms and elementwise ops ran on one thread anyway. So every
// kernel's threads are these, and a GEMM is split into column (or row) blocks, one single-threaded
// OpenBLAS call each. Between jobs a worker busy-waits for at most 100 us before it sleeps (a pause
// instruction between checks, and after 10 us a sched_yield, so that other programs waiting for a CPU
// run) -- a training step's jobs come microseconds apart, and waking a sleeping thread costs ~25 us on
// a virtual machine's CPUs -- so the pool spins only while work is streaming (GPULAB_SPIN_US sets the
// limit; parallel.cpp has the measurements).
//
// Determinism: the work is cut into parts by the thread count alone -- never by which threads happen
// to be free -- so a result summed over parts (a convolution's weight gradient) is the same, bit for
// bit, from run to run at one thread count. When the pool is already busy (a kernel called from two
// threads at once: the emulated GPU's stream and a DataLoader's worker) the second caller runs the same
// parts itself, one after another; inside a part, a nested parallelFor runs serially.
#include <algorithm>
#include <cstdint>
#include <functional>

namespace gpulab {

// The threads the CPU kernels use: the caller's and numThreads() - 1 workers. At start, OMP_NUM_THREADS
// when it is set to a positive number (as PyTorch reads it), else the CPUs this process may run on.
int numThreads();

// torch.set_num_threads: from the next kernel on. 1 to 1024; anything else is refused (RuntimeError).
void setNumThreads(int threads);

// How many parts parallelFor cuts n items into: min(numThreads(), ceil(n / grain)), at least 1 (0 items:
// 1 part, which parallelFor does not run). Kernels that keep a scratch buffer per part ask this first.
int parallelParts(std::int64_t n, std::int64_t grain);

// Runs fn(part, begin, end) over [0, n) cut into parallelParts(n, grain) contiguous ranges of about
// equal size, on the pool's threads and the caller's; returns when every part is done. An exception
// from a part is rethrown here (the first one, after every part has finished).
void parallelFor(std::int64_t n, std::int64_t grain, const std::function<void(int part, std::int64_t begin, std::int64_t end)>& fn);

// For the calling thread, for the rest of its life: its kernels cut their work into the same parts
// (so their results stay bit-identical to the same kernels called anywhere else) but run them on at
// most numThreads() - 1 threads, leaving the host's thread a CPU. The emulated GPU's streams call it:
// they stand for a device working beside the host, and a part that waited for a CPU the host's thread
// held made the whole kernel wait -- on two CPUs a training loop's time on the emulated GPU varied
// threefold from run to run (lesson 11). With two threads their kernels run on the stream's own.
void leaveACpuToTheHost();

// The same for work that needs no part index (no scratch per part): fn(begin, end).
template <class F>
void parallelRanges(std::int64_t n, std::int64_t grain, F&& fn) {
  parallelFor(n, grain, [&](int, std::int64_t begin, std::int64_t end) { fn(begin, end); });
}

// Grains for the kernels' element loops: below them, handing a part to a worker costs about what it
// saves. Measured here with the workers spinning between jobs (relu, median of nine): 32K elements
// 5.8-8.4 us on one thread, 9.0-9.3 us cut in two; 128K elements 27.5-28.6 us on one, 18.7-19.8 us
// cut in two. (With 256K, the grain of the days when every job woke sleeping threads, a middle-sized
// op ran on one thread while a larger one ran on two: lesson 10's chunk of 128 rows fell behind the
// larger chunks as soon as their sums ran on two threads as well.)
constexpr std::int64_t kElementGrain = std::int64_t{1} << 16;      // a load, an op, a store an element
constexpr std::int64_t kHeavyElementGrain = std::int64_t{1} << 14;  // an optimizer's update: tens of flops
// The grain of a gather's rows (index_select, a DataLoader's batch), rows of `rowBytes` each: 64 KB of
// copying a part. A batch from a data set larger than the caches waits on memory, and each core
// brings in its own share.
constexpr std::int64_t copyGrain(std::int64_t rowBytes) {
  return std::max<std::int64_t>(1, (std::int64_t{64} << 10) / std::max<std::int64_t>(rowBytes, 1));
}

}  // namespace gpulab
