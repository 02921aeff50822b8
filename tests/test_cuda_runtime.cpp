// The CUDA runtime door's rules that do not need a GPU to test: which GPUs are usable and how the
// engine's cuda:N maps to CUDA ordinals, and reading NVML's process list at the layout the driver
// writes. (What needs a GPU is in test_cuda_parity, test_device_rule and test_memory.)
#include <cstring>

#include "engine/kernels/strided.h"
#include "engine/core/errors.h"
#include "engine/memory/caching_allocator.h"
#include "engine/runtime/device_selection.h"
#include "engine/runtime/nvml_processes.h"
#include "fake_arena.h"
#include "test_util.h"

using namespace gpulab;
using namespace gpulab::cuda;

namespace {

DeviceProperties gpu(int ordinal, const char* name, int major, int minor) {
  DeviceProperties d;
  d.cuda_ordinal = ordinal;
  d.name = name;
  d.major = major;
  d.minor = minor;
  return d;
}

// A fake nvmlDeviceGetComputeRunningProcesses: `total` processes written at `stride` bytes each, and
// NVML_ERROR_INSUFFICIENT_SIZE while the buffer is too small.
struct FakeNvml {
  unsigned int total;
  std::size_t stride;
  int calls = 0;
  int operator()(unsigned int* count, void* buffer) {
    ++calls;
    if (*count < total) {
      *count = total;
      return kNvmlInsufficientSize;
    }
    auto* bytes = static_cast<unsigned char*>(buffer);
    std::memset(bytes, 0xAB, static_cast<std::size_t>(*count) * stride);  // garbage in the padding and tails
    for (unsigned int i = 0; i < total; ++i) {
      const unsigned int pid = 1000 + i;
      const unsigned long long used = (i + 1) * 1048576ull;
      std::memcpy(bytes + i * stride, &pid, sizeof pid);
      std::memcpy(bytes + i * stride + 8, &used, sizeof used);
    }
    *count = total;
    return kNvmlSuccess;
  }
};

// A device whose driver fails as after a faulting kernel: cudaMalloc and cudaFree report an error
// that is not out-of-memory.
class StickyErrorArena final : public RawAllocator {
 public:
  explicit StickyErrorArena(std::size_t capacity) : inner(capacity) {}
  void* rawAllocate(std::size_t bytes) override {
    if (broken) throw CudaError("CUDA error: cudaErrorIllegalAddress: an illegal memory access was encountered");
    return inner.rawAllocate(bytes);
  }
  void rawFree(void* ptr, std::size_t bytes) override {
    if (broken) throw CudaError("CUDA error: cudaErrorIllegalAddress: an illegal memory access was encountered");
    inner.rawFree(ptr, bytes);
  }
  MemoryCapacity capacity() const override { return inner.capacity(); }
  std::string kindName() const override { return "CUDA"; }
  std::string deviceName() const override { return "GPU 0"; }
  test::FakeArena inner;
  bool broken = false;
};

}  // namespace

class TestCudaRuntime : public QObject {
  Q_OBJECT

 private slots:
  // An old GPU enumerated first must not become cuda:0's ordinal.
  void engineIndicesMapToTheOrdinalsOfUsableGpus() {
    const DeviceSelection s = selectUsableDevices({gpu(0, "GeForce GTX 1080", 6, 1), gpu(1, "NVIDIA H100", 9, 0),
                                                   gpu(2, "Tesla P100", 6, 0), gpu(3, "NVIDIA T4", 7, 5)});
    QCOMPARE(s.usable.size(), std::size_t{2});
    QCOMPARE(s.usable[0].index, 0);
    QCOMPARE(s.usable[0].cuda_ordinal, 1);
    QCOMPARE(s.usable[0].name, std::string("NVIDIA H100"));
    QCOMPARE(s.usable[1].index, 1);
    QCOMPARE(s.usable[1].cuda_ordinal, 3);
    QVERIFY2(s.skipped.find("GeForce GTX 1080 (CUDA device 0) has compute capability 6.1") != std::string::npos, s.skipped.c_str());
    QVERIFY(s.skipped.find("Tesla P100 (CUDA device 2)") != std::string::npos);
  }

  void noUsableGpuSaysWhichWereSkipped() {
    const DeviceSelection s = selectUsableDevices({gpu(0, "Quadro K620", 5, 0)});
    QVERIFY(s.usable.empty());
    QVERIFY2(s.skipped.find("Quadro K620 (CUDA device 0) has compute capability 5.0; GPU Lab's kernels need 7.5 or newer") !=
                 std::string::npos, s.skipped.c_str());
  }

  // A CUDA error that is not out-of-memory is reported as itself: no "CUDA out of memory", no cache
  // emptied on its account, and the statistics stay true when a free is refused.
  void stickyErrorsAreNotReportedAsOutOfMemory() {
    auto raw = std::make_unique<StickyErrorArena>(64u << 20);
    StickyErrorArena* arena = raw.get();
    CachingAllocator alloc(std::move(raw), Device(DeviceType::CUDA, 0));
    void* kept = alloc.allocate(1 << 20);
    alloc.free(alloc.allocate(8 << 20));  // a cached, wholly free segment
    const MemoryStats before = alloc.stats();
    arena->broken = true;
    try {
      alloc.allocate(32 << 20);
      QFAIL("expected CudaError");
    } catch (const OutOfMemoryError& e) {
      QFAIL(qPrintable(QString("reported as out of memory: ") + e.what()));
    } catch (const CudaError& e) {
      QVERIFY2(std::string(e.what()).find("illegal memory access") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(CudaError, alloc.emptyCache());
    const MemoryStats after = alloc.stats();
    QCOMPARE(after.num_ooms, before.num_ooms);
    QCOMPARE(after.reserved_bytes.current, before.reserved_bytes.current);  // the refused segment is still counted
    QCOMPARE(after.segments.current, before.segments.current);
    arena->broken = false;
    alloc.free(kept);
    QVERIFY(alloc.emptyCache() > 0);
    QCOMPARE(arena->inner.outstanding, qint64(0));
    QCOMPARE(alloc.stats().reserved_bytes.current, qint64(0));
  }

  // The CUDA kernels' offset calculator sees only dimensions that really are strided (issue 9, item 8).
  void dimensionsCoalesceBeforeTheKernelsIndexMath() {
    using detail::coalesceDims;
    const Shape ten(10, 2);  // a contiguous 10-D tensor: 1 dimension of 1024
    Shape strides(10);
    for (std::size_t d = 0; d < 10; ++d) strides[d] = std::int64_t{1} << (9 - d);
    auto c = coalesceDims(ten, strides, strides);
    QCOMPARE(c.sizes, (Shape{1024}));
    QCOMPARE(c.strides[0], (Shape{1}));
    // A transpose stays two dimensions; size-1 dimensions vanish.
    c = coalesceDims({3, 1, 2}, {1, 6, 3}, {2, 2, 1});
    QCOMPARE(c.sizes, (Shape{3, 2}));
    QCOMPARE(c.strides[0], (Shape{1, 3}));
    QCOMPARE(c.strides[1], (Shape{2, 1}));
    // Broadcasting (stride 0) does not merge with a real stride, but two broadcast dims do.
    c = coalesceDims({4, 5}, {5, 1}, {0, 1});
    QCOMPARE(c.sizes, (Shape{4, 5}));
    c = coalesceDims({4, 5, 6}, {30, 6, 1}, {0, 0, 1});
    QCOMPARE(c.sizes, (Shape{20, 6}));
    QCOMPARE(c.strides[1], (Shape{0, 1}));
  }

  void nvmlEntrySizeFollowsTheDriver() {
    QCOMPARE(nvmlProcessInfoSize(driverMajorVersion("530.30.02")), std::size_t{24});
    QCOMPARE(nvmlProcessInfoSize(driverMajorVersion("535.54.03")), std::size_t{32});
    QCOMPARE(nvmlProcessInfoSize(driverMajorVersion("580.159.04")), std::size_t{32});
    QCOMPARE(driverMajorVersion(""), 0);
  }

  // 100 processes at the R535+ layout: more than a fixed 64-entry buffer, every entry read right.
  void nvmlProcessListIsReadAtTheDriversStrideAndGrows_data() {
    QTest::addColumn<int>("stride");
    QTest::newRow("R530 and older: 24-byte entries") << 24;
    QTest::newRow("R535 and newer: 32-byte entries") << 32;
  }
  void nvmlProcessListIsReadAtTheDriversStrideAndGrows() {
    QFETCH(int, stride);
    FakeNvml fake{100, static_cast<std::size_t>(stride)};
    const NvmlProcessList list = queryNvmlProcesses(fake, static_cast<std::size_t>(stride));
    QVERIFY(list.ok);
    QVERIFY(fake.calls >= 2);  // the first buffer was too small
    QCOMPARE(list.processes.size(), std::size_t{100});
    for (unsigned int i = 0; i < 100; ++i) {
      QCOMPARE(list.processes[i].pid, 1000 + i);
      QCOMPARE(list.processes[i].used_bytes, (i + 1) * 1048576ull);
    }
  }

  void nvmlErrorsAreReportedNotIgnored() {
    const NvmlProcessList list = queryNvmlProcesses([](unsigned int*, void*) { return 3; }, 32);  // NVML_ERROR_NOT_SUPPORTED
    QVERIFY(!list.ok);
    QVERIFY2(list.error.find("error 3") != std::string::npos, list.error.c_str());
  }
};

QTEST_GUILESS_MAIN(TestCudaRuntime)
#include "test_cuda_runtime.moc"
