// Memory snapshots in PyTorch's format (engine/runtime/memory_snapshot.h): the pickle writer against
// the bytes Python's pickle writes, the snapshot's segments, blocks and trace after a known sequence
// of allocations, frees and an out-of-memory error (over a fake arena, on the CPU under a budget and
// on the emulated GPU), the atomic write, and -- where /usr/bin/python3 has torch -- that pickle.load
// and torch.cuda._memory_viz read what GPU Lab writes (GPULAB_TEST_PYTHON names another python).
#include <QProcess>
#include <QTemporaryDir>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <limits>
#include <optional>

#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/memory_snapshot.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "fake_arena.h"
#include "test_util.h"

using namespace gpulab;
using namespace std::string_view_literals;

namespace {

constexpr std::int64_t MiB = 1 << 20;

QByteArray bytes(const std::string& s) { return QByteArray(s.data(), static_cast<qsizetype>(s.size())); }

std::vector<std::string> actionsOf(const PickleValue& trace) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < trace.size(); ++i) out.push_back(trace[i].get("action")->asStr());
  return out;
}
std::vector<std::int64_t> sizesOf(const PickleValue& trace) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < trace.size(); ++i) out.push_back(trace[i].get("size")->asInt());
  return out;
}
// "gpulab:0:activation;gpulab:3:step 3": a frames list as the visualiser prints it, one frame a part.
QString framesText(const PickleValue& frames) {
  QStringList parts;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    parts << QString("%1:%2:%3").arg(QString::fromStdString(frames[i].get("filename")->asStr())).arg(frames[i].get("line")->asInt())
                 .arg(QString::fromStdString(frames[i].get("name")->asStr()));
  }
  return parts.join(";");
}

// A caching allocator over a 64 MiB fake arena on cuda:1, and what it went through while a history
// recorded: alloc 1000 B (activation), alloc 3 MiB (parameter), free the first, alloc 5000 B at step
// 3, then an out-of-memory error for 100 MiB.
struct Scenario {
  Scenario() {
    auto raw = std::make_unique<test::FakeArena>(64 * MiB);
    arena = raw.get();
    alloc = std::make_unique<CachingAllocator>(std::move(raw), Device(DeviceType::CUDA, 1));
  }
  void run() {
    {
      MemoryCategoryScope scope(MemoryCategory::Activation);
      a = alloc->allocate(1000);
    }
    {
      MemoryCategoryScope scope(MemoryCategory::Parameter);
      b = alloc->allocate(3 * MiB);
    }
    alloc->free(a);
    setMemoryStep(3);
    c = alloc->allocate(5000);
    setMemoryStep(0);
    try {
      alloc->allocate(100 * MiB);
      oomRaised = false;
    } catch (const OutOfMemoryError&) {
      oomRaised = true;
    }
  }
  test::FakeArena* arena;
  std::unique_ptr<CachingAllocator> alloc;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  bool oomRaised = false;
};

const std::vector<std::string> kScenarioActions{"segment_alloc", "alloc", "segment_alloc", "alloc", "free_requested",
                                                "free_completed", "alloc", "oom"};
const std::vector<std::int64_t> kScenarioSizes{2 * MiB, 1024, 20 * MiB, 3 * MiB, 1024, 1024, 5120, 100 * MiB};

}  // namespace

class TestMemorySnapshot : public QObject {
  Q_OBJECT

 private slots:
  // (a) The pickle writer: the bytes of pickletools.optimize(pickle.dumps(value, protocol=2)) from
  // Python 3.11 (optimize drops the memo PUTs nothing GETs; the writer writes none of those).
  void pickleMatchesPython() {
    struct Case {
      const char* python;
      PickleValue value;
      const char* hex;
    };
    PickleValue nested = PickleValue::dict();
    PickleValue inner = PickleValue::dict();
    inner.set("a", 2);
    nested.set("a", 1);
    nested.set("b", PickleValue::list({inner}));
    PickleValue ax = PickleValue::dict();
    ax.set("a", "x");
    PickleValue segment = PickleValue::dict();
    segment.set("device", 0);
    segment.set("address", 140000000000000ULL);
    segment.set("segment_pool_id", PickleValue::tuple({0, 0}));
    segment.set("is_expandable", false);
    segment.set("state", "inactive");
    PickleValue snapshotLike = PickleValue::dict();
    snapshotLike.set("segments", PickleValue::list({segment}));
    snapshotLike.set("f", PickleValue::list({1.5, -1, nullptr, true, "\xc3\xa9", PickleValue::tuple()}));
    const std::vector<Case> cases{
        {"None", PickleValue(), "80024e2e"},
        {"True", true, "8002882e"},
        {"False", false, "8002892e"},
        {"0", 0, "80024b002e"},
        {"255", 255, "80024bff2e"},
        {"256", 256, "80024d00012e"},
        {"65535", 65535, "80024dffff2e"},
        {"65536", 65536, "80024a000001002e"},
        {"-1", -1, "80024affffffff2e"},
        {"2**31-1", 2147483647, "80024affffff7f2e"},
        {"2**31", 2147483648LL, "80028a0500000080002e"},
        {"-2**31-1", -2147483649LL, "80028a05ffffff7fff2e"},
        {"2**63-1", std::numeric_limits<std::int64_t>::max(), "80028a08ffffffffffffff7f2e"},
        {"-2**63", std::numeric_limits<std::int64_t>::min(), "80028a0800000000000000802e"},
        {"2**64-1", std::numeric_limits<std::uint64_t>::max(), "80028a09ffffffffffffffff002e"},
        {"2**31 unsigned", 2147483648ULL, "80028a0500000080002e"},
        {"1.5", 1.5, "8002473ff80000000000002e"},
        {"0.1", 0.1, "8002473fb999999999999a2e"},
        {"''", "", "800258000000002e"},
        {"'a'", "a", "80025801000000612e"},
        {"'\u00e9'", "\xc3\xa9", "80025802000000c3a92e"},
        {"[]", PickleValue::list(), "80025d2e"},
        {"[1]", PickleValue::list({1}), "80025d4b01612e"},
        {"[1, 2]", PickleValue::list({1, 2}), "80025d284b014b02652e"},
        {"()", PickleValue::tuple(), "8002292e"},
        {"(1,)", PickleValue::tuple({1}), "80024b01852e"},
        {"(1, 2)", PickleValue::tuple({1, 2}), "80024b014b02862e"},
        {"(1, 2, 3)", PickleValue::tuple({1, 2, 3}), "80024b014b024b03872e"},
        {"(1, 2, 3, 4)", PickleValue::tuple({1, 2, 3, 4}), "8002284b014b024b034b04742e"},
        {"{}", PickleValue::dict(), "80027d2e"},
        {"{'a': 1}", [] { PickleValue d = PickleValue::dict(); d.set("a", 1); return d; }(), "80027d5801000000614b01732e"},
        {"{'a': 1, 'b': [{'a': 2}]}", nested, "80027d2858010000006171004b015801000000625d7d68004b027361752e"},
        {"['x', 'x', 'y', 'x']", PickleValue::list({"x", "x", "y", "x"}), "80025d28580100000078710068005801000000796800652e"},
        {"[{'a': 'x'}, {'a': 'x'}]", PickleValue::list({ax, ax}), "80025d287d58010000006171005801000000787101737d6800680173652e"},
        {"{'segments': [{'device': 0, 'address': 140000000000000, 'segment_pool_id': (0, 0), 'is_expandable': False, "
         "'state': 'inactive'}], 'f': [1.5, -1, None, True, '\u00e9', ()]}",
         snapshotLike,
         "80027d2858080000007365676d656e74735d7d2858060000006465766963654b005807000000616464726573738a0600c0444a547f580f000000"
         "7365676d656e745f706f6f6c5f69644b004b0086580d00000069735f657870616e6461626c6589580500000073746174655808000000696e6163"
         "7469766575615801000000665d28473ff80000000000004affffffff4e885802000000c3a92965752e"},
    };
    for (const Case& c : cases) {
      QVERIFY2(bytes(c.value.dumps()).toHex() == QByteArray(c.hex),
               qPrintable(QString("%1: got %2, Python gives %3").arg(c.python, bytes(c.value.dumps()).toHex(), c.hex)));
    }
  }

  // Batches of 1000 as the C pickler writes them (a last batch of one item still MARK..APPENDS).
  void pickleBatches() {
    std::vector<PickleValue> zeros(1001, PickleValue(0));
    std::string expected = "\x80\x02](";
    for (int i = 0; i < 1000; ++i) expected += std::string("K\0", 2);
    expected += std::string("e(K\0e.", 6);
    QCOMPARE(bytes(PickleValue::list(zeros).dumps()), bytes(expected));

    PickleValue d = PickleValue::dict();
    for (int i = 0; i < 1001; ++i) d.set(std::to_string(i), 0);
    const std::string out = d.dumps();
    QVERIFY(out.starts_with("\x80\x02}(X\x01\x00\x00\x00" "0K\x00"sv));
    QVERIFY(out.ends_with("K\x00u(X\x04\x00\x00\x00" "1000K\x00u."sv));
  }

  // Memo slots past 255 use LONG_BINPUT/LONG_BINGET: ['s0', ..., 's299'] twice (checked with Python).
  void pickleLongMemo() {
    std::vector<PickleValue> items;
    for (int round = 0; round < 2; ++round)
      for (int i = 0; i < 300; ++i) items.emplace_back("s" + std::to_string(i));
    auto le32 = [](std::uint32_t v) { return std::string{char(v & 0xff), char((v >> 8) & 0xff), char((v >> 16) & 0xff), char(v >> 24)}; };
    std::string expected = "\x80\x02](";
    for (std::uint32_t i = 0; i < 300; ++i) {
      const std::string s = "s" + std::to_string(i);
      expected += "X" + le32(static_cast<std::uint32_t>(s.size())) + s;
      expected += i < 256 ? std::string{'q', char(i)} : "r" + le32(i);
    }
    for (std::uint32_t i = 0; i < 300; ++i) expected += i < 256 ? std::string{'h', char(i)} : "j" + le32(i);
    expected += "e.";
    QCOMPARE(bytes(PickleValue::list(items).dumps()).toHex(), bytes(expected).toHex());
  }

  void pickleDictKeepsFirstPlace() {
    PickleValue d = PickleValue::dict();
    d.set("a", 1);
    d.set("b", 2);
    d.set("a", 3);
    QCOMPARE(d.size(), std::size_t(2));
    QCOMPARE(d.key(0), std::string("a"));
    QCOMPARE(d.get("a")->asInt(), std::int64_t(3));
    QVERIFY(d.get("c") == nullptr);
    QVERIFY_THROWS_EXCEPTION(ValueError, PickleValue::list().set("a", 1));
  }

  // The streaming writer refuses a container whose count does not match what follows.
  void pickleWriterChecksCounts() {
    QCOMPARE(bytes(pickleDumps([](PickleWriter& w) {
               w.beginList(2);
               w.str("a");
               w.value(std::int64_t{-2});
               w.end();
             })).toHex(),
             QByteArray("80025d285801000000614afeffffff652e"));  // pickle.dumps(['a', -2], 2)
    QVERIFY_THROWS_EXCEPTION(Error, pickleDumps([](PickleWriter& w) {
      w.beginList(2);
      w.value(1);
      w.end();
    }));
    QVERIFY_THROWS_EXCEPTION(Error, pickleDumps([](PickleWriter& w) {
      w.beginDict(1);
      w.str("a");
      w.value(1);
      w.value(2);
    }));
    QVERIFY_THROWS_EXCEPTION(Error, pickleDumps([](PickleWriter&) {}));
  }

  // (b) The snapshot after a known sequence, over a fake arena: every segment, block and trace entry.
  void snapshotOfKnownSequence() {
    Scenario s;
    MemoryHistory history(*s.alloc);
    s.run();
    QVERIFY(s.oomRaised);
    const PickleValue snap = history.snapshot();
    QCOMPARE(snap.key(0), std::string("segments"));
    QCOMPARE(snap.key(1), std::string("device_traces"));
    QVERIFY(snap.get("allocator_settings") && snap.get("allocator_settings")->kind() == PickleValue::Kind::Dict);

    // cuda:1 keeps its index: two traces, the first empty.
    const PickleValue& traces = *snap.get("device_traces");
    QCOMPARE(traces.size(), std::size_t(2));
    QCOMPARE(traces[0].size(), std::size_t(0));
    const PickleValue& trace = traces[1];
    QCOMPARE(actionsOf(trace), kScenarioActions);
    QCOMPARE(sizesOf(trace), kScenarioSizes);
    const auto addr = [](const void* p) { return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p)); };
    QCOMPARE(trace[1].get("addr")->asInt(), addr(s.a));
    QCOMPARE(trace[3].get("addr")->asInt(), addr(s.b));
    QCOMPARE(trace[5].get("addr")->asInt(), addr(s.a));
    QCOMPARE(trace[6].get("addr")->asInt(), addr(s.c));
    QCOMPARE(trace[7].get("device_free")->asInt(), 64 * MiB - 22 * MiB);  // the arena less both segments
    QCOMPARE(framesText(*trace[1].get("frames")), QString("gpulab:0:activation"));
    QCOMPARE(framesText(*trace[3].get("frames")), QString("gpulab:0:parameter"));
    QCOMPARE(framesText(*trace[6].get("frames")), QString("gpulab:0:other;gpulab:3:step 3"));
    std::int64_t lastTime = 0;
    for (std::size_t i = 0; i < trace.size(); ++i) {
      QCOMPARE(trace[i].get("stream")->asInt(), std::int64_t(0));
      QVERIFY(trace[i].get("time_us")->asInt() >= lastTime);
      lastTime = trace[i].get("time_us")->asInt();
    }

    // The allocator now: the small segment holds c (5000 of 5120 bytes) and a free rest; the large
    // one holds b and a free rest.
    const PickleValue& segments = *snap.get("segments");
    QCOMPARE(segments.size(), std::size_t(2));
    const PickleValue& small = segments[0];
    QCOMPARE(small.get("device")->asInt(), std::int64_t(1));
    QCOMPARE(small.get("address")->asInt(), trace[0].get("addr")->asInt());
    QCOMPARE(small.get("total_size")->asInt(), 2 * MiB);
    QCOMPARE(small.get("allocated_size")->asInt(), std::int64_t(5120));
    QCOMPARE(small.get("active_size")->asInt(), std::int64_t(5120));
    QCOMPARE(small.get("requested_size")->asInt(), std::int64_t(5000));
    QCOMPARE(small.get("segment_type")->asStr(), std::string("small"));
    QCOMPARE(small.get("segment_pool_id")->kind(), PickleValue::Kind::Tuple);
    QCOMPARE(small.get("is_expandable")->kind(), PickleValue::Kind::Bool);
    const PickleValue& smallBlocks = *small.get("blocks");
    QCOMPARE(smallBlocks.size(), std::size_t(2));
    QCOMPARE(smallBlocks[0].get("address")->asInt(), addr(s.c));
    QCOMPARE(smallBlocks[0].get("state")->asStr(), std::string("active_allocated"));
    QCOMPARE(smallBlocks[0].get("size")->asInt(), std::int64_t(5120));
    QCOMPARE(smallBlocks[0].get("requested_size")->asInt(), std::int64_t(5000));
    QCOMPARE(framesText(*smallBlocks[0].get("frames")), QString("gpulab:0:other;gpulab:3:step 3"));  // its allocation's
    QCOMPARE(smallBlocks[1].get("state")->asStr(), std::string("inactive"));
    QCOMPARE(smallBlocks[1].get("address")->asInt(), addr(s.c) + 5120);
    QCOMPARE(smallBlocks[1].get("size")->asInt(), 2 * MiB - 5120);
    const PickleValue& large = segments[1];
    QCOMPARE(large.get("segment_type")->asStr(), std::string("large"));
    QCOMPARE(large.get("total_size")->asInt(), 20 * MiB);
    QCOMPARE(large.get("allocated_size")->asInt(), 3 * MiB);
    const PickleValue& largeBlocks = *large.get("blocks");
    QCOMPARE(largeBlocks.size(), std::size_t(2));
    QCOMPARE(largeBlocks[0].get("address")->asInt(), addr(s.b));
    QCOMPARE(framesText(*largeBlocks[0].get("frames")), QString("gpulab:0:parameter"));
    QCOMPARE(largeBlocks[1].get("size")->asInt(), 17 * MiB);
    QCOMPARE(snap.get("gpulab")->get("devices")->operator[](1).asStr(), std::string("cuda:1"));
    QVERIFY(snap.get("gpulab")->get("devices")->operator[](0).kind() == PickleValue::Kind::None);
    // The streamed pickle is the pickle of that value.
    QCOMPARE(bytes(history.snapshotPickle()).toHex(), bytes(snap.dumps()).toHex());

    // Freeing everything and emptying the cache: the trace ends with the frees and both segment_frees.
    s.alloc->free(s.b);
    s.alloc->free(s.c);
    s.alloc->emptyCache();
    const PickleValue after = history.snapshot();
    QCOMPARE(after.get("segments")->size(), std::size_t(0));
    std::vector<std::string> actions = actionsOf((*after.get("device_traces"))[1]);
    QCOMPARE(actions.size(), kScenarioActions.size() + 6);
    QCOMPARE(std::vector<std::string>(actions.end() - 2, actions.end()), (std::vector<std::string>{"segment_free", "segment_free"}));
    QCOMPARE(history.entryCount(Device(DeviceType::CUDA, 1)), kScenarioActions.size() + 6);
  }

  // Snapshots taken while another thread allocates and frees: each one is a consistent state (the
  // blocks tile every segment) and the trace only grows.
  void snapshotWhileAllocating() {
    Scenario s;
    MemoryHistory history(*s.alloc);
    std::atomic<bool> done{false};
    std::int64_t allocations = 0;
    std::thread worker([&] {
      std::vector<void*> live;
      for (int i = 0; i < 4000; ++i) {
        const auto at = static_cast<std::size_t>(i) % 8;
        if (live.size() < 8) {
          live.push_back(s.alloc->allocate(static_cast<std::size_t>(512 + (i * 7919) % (3 * MiB))));
          ++allocations;
        } else {
          s.alloc->free(live[at]);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
        }
      }
      for (void* p : live) s.alloc->free(p);
      done = true;
    });
    struct Joiner {
      std::thread& t;
      ~Joiner() { t.join(); }  // also when a check below fails and returns
    } joiner{worker};
    std::size_t lastEntries = 0;
    int snapshots = 0;
    for (bool last = false; !last;) {
      last = done;  // one more snapshot after the worker has finished
      const PickleValue snap = history.snapshot();
      ++snapshots;
      const PickleValue& segments = *snap.get("segments");
      for (std::size_t i = 0; i < segments.size(); ++i) {
        std::int64_t at = segments[i].get("address")->asInt();
        const PickleValue& blocks = *segments[i].get("blocks");
        for (std::size_t j = 0; j < blocks.size(); ++j) {
          QCOMPARE(blocks[j].get("address")->asInt(), at);
          at += blocks[j].get("size")->asInt();
        }
        QCOMPARE(at, segments[i].get("address")->asInt() + segments[i].get("total_size")->asInt());
      }
      const PickleValue& trace = (*snap.get("device_traces"))[1];
      QVERIFY(trace.size() >= lastEntries);
      lastEntries = trace.size();
      if (last) {
        const std::vector<std::string> actions = actionsOf(trace);
        QCOMPARE(std::count(actions.begin(), actions.end(), "alloc"), allocations);
        QCOMPARE(std::count(actions.begin(), actions.end(), "free_completed"), allocations);
      }
    }
    qInfo("%d snapshots while the worker ran", snapshots);
  }

  // max_entries keeps the newest entries, as _record_memory_history(max_entries=...) does.
  void maxEntriesKeepsTheNewest() {
    Scenario s;
    MemoryHistory history(*s.alloc, 3);
    s.run();
    const PickleValue snap = history.snapshot();
    QCOMPARE(actionsOf((*snap.get("device_traces"))[1]), (std::vector<std::string>{"free_completed", "alloc", "oom"}));
    // An allocation made before the history started is still in the state.
    MemoryHistory late(*s.alloc);
    const PickleValue lateSnap = late.snapshot();
    QCOMPARE((*lateSnap.get("device_traces"))[1].size(), std::size_t(0));
    QCOMPARE(lateSnap.get("segments")->size(), std::size_t(2));
    QCOMPARE(framesText(*(*(*lateSnap.get("segments"))[0].get("blocks"))[0].get("frames")), QString("gpulab:0:other"));
  }

  // Tensors on a real device of the engine, under a small cap: on the CPU (emulated budget) and on
  // the emulated GPU (memory fraction).
  void snapshotOfTensors_data() {
    QTest::addColumn<QString>("device");
    QTest::newRow("cpu budget") << "cpu";
    QTest::newRow("emulated gpu") << "cuda";
  }
  void snapshotOfTensors() {
    QFETCH(QString, device);
    Device dev = kCPU;
    if (device == "cuda") {
      if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here (GPULAB_EMULATED_GPU)");
      dev = *cuda::emulatedDevice();
    }
    empty_cache(dev);
    MemoryHistory history(dev);
    std::optional<OutOfMemoryError> oom;
    const void* kept = nullptr;
    const void* freed = nullptr;
    {
      if (dev.isCpu()) set_cpu_memory_budget(memory_reserved(kCPU) + 16 * MiB);
      else set_per_process_memory_fraction(0.02, dev);
      Tensor small = zeros({1000}, {.device = dev});        // 4000 bytes -> 4096
      Tensor big = zeros({1 << 20}, {.device = dev});       // 4 MiB
      kept = small.data_ptr();
      freed = big.data_ptr();
      big = Tensor();
      try {
        Tensor huge = zeros({64 << 20}, {.device = dev});  // 256 MiB: over the cap
      } catch (const OutOfMemoryError& e) {
        oom.emplace(e);
      }
      const PickleValue snap = history.snapshot();
      if (dev.isCpu()) set_cpu_memory_budget(0);
      else set_per_process_memory_fraction(1.0, dev);
      QVERIFY(oom.has_value());

      // A one-device history: the CPU is device 0, a CUDA device keeps its index.
      const int index = dev.isCpu() ? 0 : dev.index();
      const PickleValue& traces = *snap.get("device_traces");
      QCOMPARE(traces.size(), std::size_t(index + 1));
      const PickleValue& trace = traces[static_cast<std::size_t>(index)];
      std::vector<std::string> actions = actionsOf(trace);
      std::vector<std::int64_t> sizes = sizesOf(trace);
      // Segment entries depend on what the cache held before; the block entries do not.
      std::vector<std::pair<std::string, std::int64_t>> blockEntries;
      for (std::size_t i = 0; i < actions.size(); ++i)
        if (!actions[i].starts_with("segment")) blockEntries.emplace_back(actions[i], sizes[i]);
      const std::vector<std::pair<std::string, std::int64_t>> expected{
          {"alloc", 4096}, {"alloc", 4 * MiB}, {"free_requested", 4 * MiB}, {"free_completed", 4 * MiB}, {"oom", 256 * MiB}};
      QCOMPARE(blockEntries, expected);
      QCOMPARE(trace[std::size_t(std::find(actions.begin(), actions.end(), "alloc") - actions.begin())].get("addr")->asInt(),
               static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(kept)));
      QCOMPARE(QString::fromStdString(snap.get("gpulab")->get("devices")->operator[](static_cast<std::size_t>(index)).asStr()),
               QString::fromStdString(cuda::deviceLabel(dev)));

      // The state: `small` is an active block, `big`'s memory is not.
      bool keptActive = false, freedActive = false;
      const PickleValue& segments = *snap.get("segments");
      for (std::size_t i = 0; i < segments.size(); ++i) {
        QCOMPARE(segments[i].get("device")->asInt(), std::int64_t(index));
        const PickleValue& blocks = *segments[i].get("blocks");
        std::int64_t total = 0;
        for (std::size_t j = 0; j < blocks.size(); ++j) {
          total += blocks[j].get("size")->asInt();
          const bool active = blocks[j].get("state")->asStr() == "active_allocated";
          const auto at = static_cast<std::uintptr_t>(blocks[j].get("address")->asInt());
          if (at == reinterpret_cast<std::uintptr_t>(kept)) keptActive = active;
          if (at == reinterpret_cast<std::uintptr_t>(freed)) freedActive = freedActive || active;
        }
        QCOMPARE(total, segments[i].get("total_size")->asInt());
      }
      QVERIFY(keptActive);
      QVERIFY(!freedActive);
    }
  }

  // A history of all devices: a CPU run is device 0 unless a GPU has memory too; "gpulab" says which.
  void allDevicesNameTheCpu() {
    MemoryHistory history;
    Tensor t = zeros({300}, {});
    const PickleValue snap = history.snapshot();
    const PickleValue& names = *snap.get("gpulab")->get("devices");
    const PickleValue& traces = *snap.get("device_traces");
    QCOMPARE(names.size(), traces.size());
    std::optional<std::size_t> cpu;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i].kind() == PickleValue::Kind::Str && names[i].asStr() == "cpu") cpu = i;
    QVERIFY(cpu.has_value());
    bool anyCuda = false;
    for (std::size_t i = 0; i < names.size(); ++i) anyCuda = anyCuda || (i != *cpu && names[i].kind() == PickleValue::Kind::Str);
    QCOMPARE(*cpu, anyCuda ? names.size() - 1 : std::size_t(0));
    QVERIFY(actionsOf(traces[*cpu]) == std::vector<std::string>{"alloc"} ||
            actionsOf(traces[*cpu]) == (std::vector<std::string>{"segment_alloc", "alloc"}));
  }

  // writeSnapshot: the file is the pickle, written through a temporary that does not stay; a folder
  // that does not exist is an IOError naming the path and the reason.
  void writeSnapshotIsAtomic() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    Scenario s;
    MemoryHistory history(*s.alloc);
    s.run();
    const std::string path = dir.filePath("run.pickle").toStdString();
    QFile(QString::fromStdString(path)).open(QIODevice::WriteOnly);  // an old file is replaced
    history.writeSnapshot(path);
    QFile f(QString::fromStdString(path));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray written = f.readAll();
    QVERIFY(written.startsWith("\x80\x02}"));
    QVERIFY(written.endsWith("."));
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden), QStringList{"run.pickle"});
    QVERIFY(QFileInfo(f).permissions() & QFileDevice::ReadOther);

    const std::string bad = dir.filePath("missing/run.pickle").toStdString();
    try {
      history.writeSnapshot(bad);
      QFAIL("no IOError for a missing folder");
    } catch (const IOError& e) {
      QVERIFY2(std::string(e.what()).find(bad) != std::string::npos, e.what());
      QVERIFY2(std::string(e.what()).find("No such file or directory") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(IOError, history.writeSnapshot(dir.path().toStdString()));  // a folder
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden), QStringList{"run.pickle"});
  }

  // Issue 27 6.1/6.2: what is not a regular file is refused by name and left as it was (a symlink, a
  // FIFO, a device node when the test may make one); a temporary a killed writer left is removed.
  void writesRefuseWhatIsNotARegularFile() {
    QTemporaryDir dir;
    Scenario s;
    MemoryHistory history(*s.alloc);
    s.run();
    const std::string target = dir.filePath("target.txt").toStdString();
    QFile t(QString::fromStdString(target));
    QVERIFY(t.open(QIODevice::WriteOnly));
    t.write("keep me");
    t.close();
    const std::string link = dir.filePath("link.pickle").toStdString();
    QVERIFY(::symlink(target.c_str(), link.c_str()) == 0);
    const std::string fifo = dir.filePath("fifo.pickle").toStdString();
    QVERIFY(::mkfifo(fifo.c_str(), 0600) == 0);
    std::vector<std::pair<std::string, std::string>> refused = {{link, "symbolic link"}, {fifo, "not a regular file"}};
    const std::string node = dir.filePath("null.pickle").toStdString();
    if (::mknod(node.c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0) refused.emplace_back(node, "not a regular file");  // root only
    for (const auto& [path, why] : refused) {
      try {
        history.writeSnapshot(path);
        QFAIL(qPrintable(QString::fromStdString("no IOError for " + path)));
      } catch (const IOError& e) {
        QVERIFY2(std::string(e.what()).find(why) != std::string::npos && std::string(e.what()).find(path) != std::string::npos, e.what());
      }
      struct stat st {};
      QVERIFY(::lstat(path.c_str(), &st) == 0);
      QVERIFY2(!S_ISREG(st.st_mode), path.c_str());  // still what it was
    }
    t.open(QIODevice::ReadOnly);
    QCOMPARE(t.readAll(), QByteArray("keep me"));  // the link's target untouched
    // A temporary of a writer that is gone (pid 4194305 is above Linux's largest) goes; one of a live
    // process (this one), and a file that only looks alike, stay.
    const QString dead = dir.filePath(".run.pickle.4194305.AbCdEf"), live = dir.filePath(QString(".run.pickle.%1.XyZ123").arg(::getpid()));
    const QString other = dir.filePath(".run.pickle.notes"), backup = dir.filePath(".run.pickle.4194305.bak");
    for (const QString& f : {dead, live, other, backup}) QFile(f).open(QIODevice::WriteOnly);
    const std::string kept = dir.filePath("run.pickle").toStdString();
    QFile(QString::fromStdString(kept)).open(QIODevice::WriteOnly);
    QVERIFY(::chmod(kept.c_str(), 0600) == 0);
    history.writeSnapshot(kept);
    QVERIFY(!QFile::exists(dead));
    QVERIFY(QFile::exists(live) && QFile::exists(other) && QFile::exists(backup));
    QVERIFY(QFileInfo(dir.filePath("run.pickle")).size() > 0);
    struct stat mode {};
    QVERIFY(::stat(kept.c_str(), &mode) == 0);
    QCOMPARE(mode.st_mode & 0777, 0600u);  // a private file stays private
  }

  // gpulab-cli --memory-snapshot: written at the end of a run, also of a failed one, and said where;
  // a file that cannot be written fails the run; the option needs a file name.
  void cliWritesTheSnapshot() {
    GPULAB_SKIP_WITHOUT_PYTHON();  // `train` and `memory` run Python labs
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    auto cli = [](const QStringList& args, const QString& fashionDir = QString()) {
      QProcess p;
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      if (!fashionDir.isEmpty()) env.insert("GPULAB_FASHION_MNIST_DIR", fashionDir);
      p.setProcessEnvironment(env);
      p.start(GPULAB_CLI_PATH, args);
      p.waitForFinished(120000);
      return std::make_pair(p.exitCode(), QString::fromUtf8(p.readAllStandardError()));
    };
    const QString ok = dir.filePath("ok.pickle");
    auto [rc, err] = cli({"train", "--epochs", "1", "--samples", "64", "--device", "cpu", "--memory-snapshot", ok});
    QVERIFY2(rc == 0, qPrintable(err));
    QVERIFY2(err.contains("memory snapshot written to " + ok), qPrintable(err));
    QFile f(ok);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QVERIFY(f.readAll().startsWith("\x80\x02}"));

    const QString failed = dir.filePath("failed.pickle");
    std::tie(rc, err) = cli({"train", "--dataset", "fashion-mnist", "--device", "cpu", "--memory-snapshot", failed}, dir.filePath("no-data"));
    QVERIFY2(rc == 1, qPrintable(err));
    QVERIFY2(err.contains("IOError") && err.contains("memory snapshot written to " + failed), qPrintable(err));
    QVERIFY(QFileInfo::exists(failed));

    std::tie(rc, err) = cli({"train", "--epochs", "1", "--samples", "64", "--device", "cpu", "--memory-snapshot", dir.filePath("no/such/dir.pickle")});
    QVERIFY2(rc == 1 && err.contains("cannot write the memory snapshot"), qPrintable(err));
    std::tie(rc, err) = cli({"memory", "--memory-snapshot"});
    QVERIFY2(rc == 2 && err.contains("needs a file name"), qPrintable(err));
  }

  // (c) PyTorch reads it: pickle.load, the trace's actions and sizes, every opcode one the
  // visualiser's JavaScript unpickler knows, and torch.cuda._memory_viz's segments/memory/stats.
  void pytorchReadsIt() {
    // Debian's python3-torch lives beside /usr/bin/python3 (a pyenv python3 on PATH may lack it).
    const QString python = qEnvironmentVariable("GPULAB_TEST_PYTHON", "/usr/bin/python3");
    if (!QFileInfo(python).isExecutable()) QSKIP(qPrintable("no " + python));
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    Scenario s;
    MemoryHistory history(*s.alloc);
    s.run();
    const QString path = dir.filePath("snapshot.pickle");
    history.writeSnapshot(path.toStdString());

    const char* script = R"PY(
import json, pickle, pickletools, sys
try:
    import torch
    from torch.cuda import _memory_viz as viz
except Exception as e:
    print('NO_TORCH', e); sys.exit(3)
data = open(sys.argv[1], 'rb').read()
s = pickle.loads(data)
assert isinstance(s, dict), type(s)
assert 'segments' in s and 'device_traces' in s, list(s)
# The opcodes MemoryViz.js's unpickler handles.
known = {'PROTO', 'STOP', 'NONE', 'NEWTRUE', 'NEWFALSE', 'BININT', 'BININT1', 'BININT2', 'LONG1', 'BINFLOAT',
         'BINUNICODE', 'SHORT_BINUNICODE', 'BINPUT', 'LONG_BINPUT', 'BINGET', 'LONG_BINGET', 'MEMOIZE', 'FRAME',
         'MARK', 'EMPTY_TUPLE', 'TUPLE', 'TUPLE1', 'TUPLE2', 'TUPLE3', 'EMPTY_LIST', 'APPEND', 'APPENDS', 'LIST',
         'EMPTY_DICT', 'SETITEM', 'SETITEMS', 'DICT'}
unknown = sorted({op.name for op, _, _ in pickletools.genops(data)} - known)
# What the visualiser and segsum() assume of a segment: its blocks tile it in address order.
problems = []
for seg in s['segments']:
    at, active, requested = seg['address'], 0, 0
    for b in seg['blocks']:
        if b['address'] != at: problems.append('block at %d, expected %d' % (b['address'], at))
        if b['requested_size'] > b['size']: problems.append('requested > size at %d' % at)
        if b['state'] == 'active_allocated':
            active += b['size']; requested += b['requested_size']
        at += b['size']
    if at != seg['address'] + seg['total_size']: problems.append('blocks do not add up to the segment')
    if (seg['allocated_size'], seg['requested_size']) != (active, requested): problems.append('segment totals')
ident = lambda text: text
def call(fn):
    # PyTorch 2.x's _memory_viz takes the snapshot dict; 1.13's takes the list of segments.
    try:
        return fn(s)
    except (TypeError, KeyError):
        return fn(s['segments'])
seg_text = call(lambda x: viz.segments(x, ident))
mem_text = call(lambda x: viz.memory(x, ident))
st = call(viz.stats)
print(json.dumps({
    'torch': torch.__version__,
    'unknown_opcodes': unknown,
    'problems': problems,
    'actions': [[e['action'] for e in t] for t in s['device_traces']],
    'sizes': [[e['size'] for e in t] for t in s['device_traces']],
    'frames': [[(f['filename'], f['line'], f['name']) for f in e['frames']] for e in s['device_traces'][1]],
    'stats': {k: getattr(v, 'value', v) for k, v in st.items()},
    'segments_text': seg_text, 'memory_text': mem_text}))
)PY";
    QProcess p;
    p.start(python, {"-c", script, path});
    QVERIFY(p.waitForFinished(120000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    const QString err = QString::fromUtf8(p.readAllStandardError());
    if (p.exitCode() == 3 && out.startsWith("NO_TORCH")) QSKIP(qPrintable("no torch for " + python + ": " + out.trimmed()));
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, qPrintable(out + err));
    const QJsonObject o = QJsonDocument::fromJson(out.toUtf8()).object();
    qInfo("read by torch %s", qPrintable(o["torch"].toString()));
    QCOMPARE(o["unknown_opcodes"].toArray(), QJsonArray());
    QCOMPARE(o["problems"].toArray(), QJsonArray());
    const QJsonArray traces = o["actions"].toArray();
    QCOMPARE(traces.size(), 2);
    QCOMPARE(traces[0].toArray().size(), 0);
    QStringList actions;
    for (const QJsonValue& a : traces[1].toArray()) actions << a.toString();
    QStringList expectedActions;
    for (const std::string& a : kScenarioActions) expectedActions << QString::fromStdString(a);
    QCOMPARE(actions, expectedActions);
    QList<qint64> sizes, expectedSizes;
    for (const QJsonValue& v : o["sizes"].toArray()[1].toArray()) sizes << v.toInteger();
    for (std::int64_t v : kScenarioSizes) expectedSizes << v;
    QCOMPARE(sizes, expectedSizes);
    QCOMPARE(o["frames"].toArray()[6].toArray()[1].toArray(), (QJsonArray{"gpulab", 3, "step 3"}));
    const QJsonObject stats = o["stats"].toObject();
    QCOMPARE(stats["segments"].toInt(), 2);
    QCOMPARE(stats["total_size"].toInteger(), 22 * MiB);
    QCOMPARE(stats["active_allocated"].toInteger(), 3 * MiB + 5120);
    QCOMPARE(stats["inactive"].toInteger(), 22 * MiB - 3 * MiB - 5120);
    // The flame graphs' lines name each block's state (1.13: stream_0;active_allocated 5120).
    const QString memoryText = o["memory_text"].toString();
    QVERIFY2(memoryText.contains("active_allocated") && memoryText.contains("inactive"), qPrintable(memoryText));
    QVERIFY2(o["segments_text"].toString().contains("seg_"), qPrintable(o["segments_text"].toString()));
  }
};

QTEST_GUILESS_MAIN(TestMemorySnapshot)
#include "test_memory_snapshot.moc"
