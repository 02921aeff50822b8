#pragma once
// A run's memory history in the format of PyTorch's torch.cuda.memory._snapshot(), so a learner can
// open what GPU Lab recorded in PyTorch's own memory visualiser (https://pytorch.org/memory_viz) and
// carry the skill over:
//
//   gpulab::MemoryHistory history;          // torch.cuda.memory._record_memory_history()
//   run_your_code();
//   history.writeSnapshot("snapshot.pickle");  // torch.cuda.memory._dump_snapshot("snapshot.pickle")
//
// The snapshot is a pickled dict (protocol 2) with PyTorch 2.x's keys:
// - "segments": the current state of each exported device's caching allocator, one dict per segment
//   {device, address, total_size, allocated_size, active_size, requested_size, stream, segment_type
//   'small'|'large', segment_pool_id (0, 0), is_expandable False, frames [], blocks [{address, size,
//   requested_size, state 'active_allocated'|'inactive', frames}]}.
// - "device_traces": one list per device index, the recorded events oldest first, each {action,
//   addr, size, stream, time_us, frames}: alloc; free_requested + free_completed (GPU Lab frees at
//   once, as PyTorch does when no other stream uses the block); segment_alloc; segment_free; oom
//   (addr 0, and device_free: what the cap -- memory fraction, CPU budget -- or the device left free
//   at that moment). empty_cache has no action of its own in PyTorch's format: the segment_free
//   entries it causes are its trace. Sizes are the allocator's rounded block sizes (the event
//   stream's; a block's requested_size is the size asked for); time_us counts from GPU Lab's
//   process start. No entry has a "category" key: the visualiser's legend code breaks on one
//   (MemoryViz.js), so the category goes in the frames.
// - "allocator_settings": {} (GPU Lab's allocator has no PYTORCH_CUDA_ALLOC_CONF).
// - "gpulab": {"devices": [the GPU Lab device at each index, e.g. "cuda:0 (emulated GPU — runs on
//   your CPU)", "cpu"; None for an index not exported], "frames": what the frames hold}. PyTorch and
//   the visualiser ignore keys they do not know.
//
// Frames: GPU Lab records no Python stack, so the frames say what the memory is for -- the memory
// category GPU Lab tagged it with: {"filename": "gpulab", "line": 0, "name": "activation"}, then,
// during training, {"filename": "gpulab", "line": N, "name": "step N"} -- which the visualiser shows
// on hover ("gpulab:0:activation") and the flame graphs stack as step;category. A block of the
// current state gets the frames of its allocation when the history holds it, its category otherwise.
//
// Devices: PyTorch's format is per CUDA device index. CUDA devices (real or emulated) keep their
// index. The CPU's allocator, which PyTorch's snapshot never has, is exported as device 0 when no
// CUDA device is exported (a CPU run opens in the visualiser as "device 0"), otherwise at the index
// after the highest CUDA one; the "gpulab" key says which is which.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/core/device.h"
#include "engine/memory/memory_events.h"

namespace gpulab {

class CachingAllocator;

// --- A small pickle writer ---------------------------------------------------------------------
// Design: only what the snapshot needs -- None, bool, int (64-bit signed and unsigned), float, str,
// list, tuple, and dicts with str keys -- written at protocol 2, which every Python 3 and the
// visualiser's JavaScript unpickler (protocols 2 to 4, a fixed set of opcodes) read. The writer
// streams: the caller says what comes (a container with its item count, then its items), so a
// snapshot of 100000 trace entries is written without building it in memory first. It runs the
// caller's calls twice: the first pass counts the strings, the second writes each string that
// occurs more than once with BINPUT on first use and BINGET after (a snapshot repeats the same keys
// and names thousands of times). The bytes are exactly Python's
// pickletools.optimize(pickle.dumps(value, protocol=2)) for a value whose equal strings are one
// object: opcodes as the C pickler picks them (BININT1/BININT2/BININT/LONG1 by size, BINFLOAT,
// BINUNICODE, TUPLE1-3 or MARK..TUPLE, EMPTY_LIST + APPEND or MARK..APPENDS, EMPTY_DICT + SETITEM or
// MARK..SETITEMS, in batches of 1000), memo slots numbered in order of first use.
class PickleWriter {
 public:
  // A value, or a dict's key (str). Containers: begin with the number of items (of a dict: of
  // key-value pairs), then the items (a dict's keys and values alternating), then end(). A count
  // that does not match what follows throws Error.
  void none();
  void value(bool b);
  void value(int i) { value(std::int64_t{i}); }
  void value(std::int64_t i);
  void value(std::uint64_t u);
  void value(double f);
  void str(std::string_view s);
  void beginList(std::size_t n);
  void beginTuple(std::size_t n);
  void beginDict(std::size_t n);
  void end();

 private:
  PickleWriter() = default;
  friend std::string pickleDumps(const std::function<void(PickleWriter&)>& emit);
  struct Open {
    char kind;  // 'l' list, 't' tuple, 'd' dict, 'r' the root
    std::size_t n;
    std::size_t written = 0;  // items written (a dict's keys and values counted one by one)
  };
  struct StringUse {
    std::size_t count = 0;
    std::int64_t memo = -1;  // its memo slot once written
  };
  void beforeItem();
  void afterItem();
  void begin(char kind, std::size_t n, char op);
  void put(char c) { if (writing_) out_.push_back(c); }
  void le(std::uint64_t v, int bytes);
  void memoOp(char shortOp, char longOp, std::int64_t slot);
  void saveLong(std::uint64_t bits64, bool negative);
  void finish();

  bool writing_ = false;
  std::string out_;
  std::vector<Open> open_;
  std::unordered_map<std::string, StringUse> strings_;
  std::int64_t nextMemo_ = 0;
};

// Runs `emit` on a writer twice (counting, then writing) and returns the pickle: PROTO 2, the one
// value `emit` writes, STOP. `emit` must make the same calls both times.
std::string pickleDumps(const std::function<void(PickleWriter&)>& emit);

// A value held in memory: what pickle.load gives for a snapshot, for tests and small values.
class PickleValue {
 public:
  enum class Kind : std::uint8_t { None, Bool, Int, UInt, Float, Str, List, Tuple, Dict };

  PickleValue() = default;  // None
  PickleValue(std::nullptr_t) {}
  PickleValue(bool b) : kind_(Kind::Bool), int_(b) {}
  PickleValue(int i) : kind_(Kind::Int), int_(i) {}
  PickleValue(long i) : kind_(Kind::Int), int_(i) {}
  PickleValue(long long i) : kind_(Kind::Int), int_(i) {}
  PickleValue(unsigned u) : kind_(Kind::Int), int_(u) {}
  PickleValue(unsigned long u) : kind_(Kind::UInt), uint_(u) {}
  PickleValue(unsigned long long u) : kind_(Kind::UInt), uint_(u) {}
  PickleValue(double f) : kind_(Kind::Float), float_(f) {}
  PickleValue(const char* s) : kind_(Kind::Str), str_(s) {}
  PickleValue(std::string s) : kind_(Kind::Str), str_(std::move(s)) {}

  static PickleValue list(std::vector<PickleValue> items = {});
  static PickleValue tuple(std::vector<PickleValue> items = {});
  static PickleValue dict();

  // Appends to a list; sets a dict entry (a key set again keeps its place, as in Python).
  PickleValue& append(PickleValue v);
  PickleValue& set(std::string key, PickleValue v);

  Kind kind() const { return kind_; }
  std::size_t size() const;                             // items of a list or tuple, entries of a dict
  const PickleValue& operator[](std::size_t i) const;   // a list's or tuple's item
  const PickleValue* get(std::string_view key) const;   // a dict's value, nullptr when absent
  const std::string& key(std::size_t i) const;          // a dict's i-th key, in insertion order
  const PickleValue& value(std::size_t i) const;        // a dict's i-th value
  std::int64_t asInt() const { return kind_ == Kind::UInt ? static_cast<std::int64_t>(uint_) : int_; }
  double asFloat() const { return float_; }
  bool asBool() const { return int_ != 0; }
  const std::string& asStr() const { return str_; }

  // Writes this value (one call per item), and the pickle of it.
  void writeTo(PickleWriter& w) const;
  std::string dumps() const;

 private:
  Kind kind_ = Kind::None;
  union {
    std::int64_t int_ = 0;
    std::uint64_t uint_;
    double float_;
  };
  std::string str_;
  std::vector<PickleValue> items_;  // a list's or tuple's items; a dict's keys and values, alternating
  friend class PickleBuilder;
};

// --- The memory history ------------------------------------------------------------------------
// RAII, like torch.cuda.memory._record_memory_history(): recording starts when it is made and stops
// when it is destroyed. Safe to snapshot from any thread while the run goes on.
class MemoryHistory {
 public:
  // The newest entries kept per device, as _record_memory_history(max_entries=100000) in PyTorch's
  // guide; older ones are dropped (the visualiser then shows their blocks as existing before the
  // history). It bounds the cost too: about 100 bytes an entry while recording, as much again in
  // the pickle (snapshotPickle streams; snapshot()'s tree takes about 2 KiB an entry).
  static constexpr std::size_t kDefaultMaxEntries = 100000;

  // Every device: the CPU, the real GPUs and the emulated GPU (see "Devices" above).
  explicit MemoryHistory(std::size_t maxEntries = kDefaultMaxEntries);
  // One device (the CPU is then device 0; a CUDA device keeps its index).
  explicit MemoryHistory(Device device, std::size_t maxEntries = kDefaultMaxEntries);
  // One allocator the engine may not know (a test's allocator over a fake arena), exported as its
  // device says. It must outlive the history.
  explicit MemoryHistory(CachingAllocator& allocator, std::size_t maxEntries = kDefaultMaxEntries);
  ~MemoryHistory();
  MemoryHistory(const MemoryHistory&) = delete;
  MemoryHistory& operator=(const MemoryHistory&) = delete;

  // The snapshot as a value (what pickle.load gives: for tests and small histories), and pickled
  // (streamed from the history, the same bytes as snapshot().dumps()).
  PickleValue snapshot() const;
  std::string snapshotPickle() const;
  // Writes snapshotPickle() to `path` atomically: a temporary file in the same folder, renamed over
  // `path` once complete. Throws IOError naming the path and the system's reason.
  void writeSnapshot(const std::string& path) const;

  // What _record_memory_history(max_entries=n) does to a history already recording: from now on the
  // newest n entries are kept (fewer than it holds: the oldest are dropped now).
  void setMaxEntries(std::size_t maxEntries);

  // How many trace entries the history holds for a GPU Lab device (at most max_entries).
  std::size_t entryCount(Device device) const;

  struct TraceEntry {
    MemoryEvent event;
    const char* action;  // "alloc", "free_requested", ...
  };
  struct Gathered;  // what a snapshot shows (memory_snapshot.cpp)

 private:
  Gathered gather() const;  // under mutex_
  void collect() const;  // drains the recorder into traces_, dropping what max_entries does not keep

  enum class Scope { All, OneDevice, OneAllocator };
  Scope scope_;
  Device device_;
  CachingAllocator* allocator_ = nullptr;
  std::size_t maxEntries_;
  std::unique_ptr<MemoryEventRecorder> recorder_;
  mutable std::mutex mutex_;
  mutable std::map<std::pair<int, int>, std::deque<TraceEntry>> traces_;  // (device type, index) -> entries
};

}  // namespace gpulab
