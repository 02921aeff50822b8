#include "engine/memory/memory_snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unordered_map>

#include "engine/core/errors.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory.h"
#include "engine/runtime/emulated_gpu.h"

namespace gpulab {

// --- PickleValue ---------------------------------------------------------------------------------

PickleValue PickleValue::list(std::vector<PickleValue> items) {
  PickleValue v;
  v.kind_ = Kind::List;
  v.items_ = std::move(items);
  return v;
}

PickleValue PickleValue::tuple(std::vector<PickleValue> items) {
  PickleValue v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}

PickleValue PickleValue::dict() {
  PickleValue v;
  v.kind_ = Kind::Dict;
  return v;
}

PickleValue& PickleValue::append(PickleValue v) {
  if (kind_ != Kind::List) throw ValueError("PickleValue::append: not a list");
  items_.push_back(std::move(v));
  return *this;
}

PickleValue& PickleValue::set(std::string key, PickleValue v) {
  if (kind_ != Kind::Dict) throw ValueError("PickleValue::set: not a dict");
  for (std::size_t i = 0; i < items_.size(); i += 2) {
    if (items_[i].str_ == key) {
      items_[i + 1] = std::move(v);
      return *this;
    }
  }
  items_.emplace_back(std::move(key));
  items_.push_back(std::move(v));
  return *this;
}

std::size_t PickleValue::size() const { return kind_ == Kind::Dict ? items_.size() / 2 : items_.size(); }

const PickleValue& PickleValue::operator[](std::size_t i) const {
  if (kind_ != Kind::List && kind_ != Kind::Tuple) throw ValueError("PickleValue: not a list or tuple");
  if (i >= items_.size()) throw IndexError("PickleValue: index " + std::to_string(i) + " out of range");
  return items_[i];
}

const PickleValue* PickleValue::get(std::string_view key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (std::size_t i = 0; i < items_.size(); i += 2)
    if (items_[i].str_ == key) return &items_[i + 1];
  return nullptr;
}

const std::string& PickleValue::key(std::size_t i) const {
  if (kind_ != Kind::Dict || 2 * i >= items_.size()) throw IndexError("PickleValue: no dict entry " + std::to_string(i));
  return items_[2 * i].str_;
}

const PickleValue& PickleValue::value(std::size_t i) const {
  if (kind_ != Kind::Dict || 2 * i >= items_.size()) throw IndexError("PickleValue: no dict entry " + std::to_string(i));
  return items_[2 * i + 1];
}

// --- The writer ----------------------------------------------------------------------------------
// Opcodes as the pickle module names them (Lib/pickle.py); the ones protocol 2 needs for these types.
namespace op {
constexpr char PROTO = '\x80', STOP = '.', NONE = 'N', NEWTRUE = '\x88', NEWFALSE = '\x89';
constexpr char BININT = 'J', BININT1 = 'K', BININT2 = 'M', LONG1 = '\x8a', BINFLOAT = 'G';
constexpr char BINUNICODE = 'X', BINPUT = 'q', LONG_BINPUT = 'r', BINGET = 'h', LONG_BINGET = 'j';
constexpr char MARK = '(', EMPTY_TUPLE = ')', TUPLE = 't', TUPLE1 = '\x85', TUPLE2 = '\x86', TUPLE3 = '\x87';
constexpr char EMPTY_LIST = ']', APPEND = 'a', APPENDS = 'e', EMPTY_DICT = '}', SETITEM = 's', SETITEMS = 'u';
}  // namespace op

class PickleWriter {
 public:
  std::string dumps(const PickleValue& root) {
    count(root);
    out_.push_back(op::PROTO);
    out_.push_back('\x02');
    save(root);
    out_.push_back(op::STOP);
    return std::move(out_);
  }

 private:
  static constexpr std::size_t kBatch = 1000;  // pickle's _BATCHSIZE

  struct StringUse {
    std::size_t count = 0;
    std::int64_t memo = -1;  // its memo slot once written
  };

  void count(const PickleValue& v) {
    if (v.kind_ == PickleValue::Kind::Str) ++strings_[v.str_].count;
    for (const PickleValue& item : v.items_) count(item);
  }

  void le(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }

  void memoOp(char shortOp, char longOp, std::int64_t slot) {
    if (slot < 256) {
      out_.push_back(shortOp);
      out_.push_back(static_cast<char>(slot));
    } else {
      out_.push_back(longOp);
      le(static_cast<std::uint64_t>(slot), 4);
    }
  }

  // Python's encode_long: the fewest little-endian two's-complement bytes that hold the value, for a
  // value given as its 64-bit pattern and sign (byte 8, when needed, is the sign extension).
  void saveLong(std::uint64_t bits64, bool negative) {
    const std::uint64_t magnitude = negative ? 0 - bits64 : bits64;
    int n = static_cast<int>(std::bit_width(magnitude) >> 3) + 1;
    auto byteAt = [bits64, negative](int i) {
      return static_cast<unsigned char>(i < 8 ? (bits64 >> (8 * i)) & 0xff : negative ? 0xff : 0);
    };
    if (negative && n > 1 && byteAt(n - 1) == 0xff && (byteAt(n - 2) & 0x80)) --n;
    out_.push_back(op::LONG1);
    out_.push_back(static_cast<char>(n));
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>(byteAt(i)));
  }

  void saveUnsigned(std::uint64_t v) {
    if (v < 256) {
      out_.push_back(op::BININT1);
      le(v, 1);
    } else if (v < 65536) {
      out_.push_back(op::BININT2);
      le(v, 2);
    } else if (v < (std::uint64_t{1} << 31)) {
      out_.push_back(op::BININT);
      le(v, 4);
    } else {
      saveLong(v, false);
    }
  }

  void saveSigned(std::int64_t v) {
    if (v >= 0) {
      saveUnsigned(static_cast<std::uint64_t>(v));
    } else if (v >= -(std::int64_t{1} << 31)) {
      out_.push_back(op::BININT);
      le(static_cast<std::uint64_t>(v), 4);
    } else {
      saveLong(static_cast<std::uint64_t>(v), true);
    }
  }

  void saveStr(const std::string& s) {
    StringUse& use = strings_[s];
    if (use.memo >= 0) {
      memoOp(op::BINGET, op::LONG_BINGET, use.memo);
      return;
    }
    out_.push_back(op::BINUNICODE);
    le(s.size(), 4);
    out_ += s;
    if (use.count > 1) {
      use.memo = nextMemo_++;
      memoOp(op::BINPUT, op::LONG_BINPUT, use.memo);
    }
  }

  // Lists and dicts as the C pickler writes them: one item with APPEND/SETITEM, more in batches of
  // 1000, each MARK ... APPENDS/SETITEMS (a last batch of one included).
  void saveBatched(const std::vector<PickleValue>& items, std::size_t stride, char one, char many) {
    const std::size_t n = items.size() / stride;
    if (n == 0) return;
    if (n == 1) {
      for (const PickleValue& v : items) save(v);
      out_.push_back(one);
      return;
    }
    for (std::size_t begin = 0; begin < n; begin += kBatch) {
      out_.push_back(op::MARK);
      const std::size_t end = std::min(n, begin + kBatch);
      for (std::size_t i = begin * stride; i < end * stride; ++i) save(items[i]);
      out_.push_back(many);
    }
  }

  void save(const PickleValue& v) {
    using K = PickleValue::Kind;
    switch (v.kind_) {
      case K::None: out_.push_back(op::NONE); break;
      case K::Bool: out_.push_back(v.int_ ? op::NEWTRUE : op::NEWFALSE); break;
      case K::Int: saveSigned(v.int_); break;
      case K::UInt: saveUnsigned(v.uint_); break;
      case K::Float:
        out_.push_back(op::BINFLOAT);
        for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((std::bit_cast<std::uint64_t>(v.float_) >> (8 * i)) & 0xff));
        break;
      case K::Str: saveStr(v.str_); break;
      case K::Tuple: {
        const std::size_t n = v.items_.size();
        if (n == 0) {
          out_.push_back(op::EMPTY_TUPLE);
          break;
        }
        if (n > 3) out_.push_back(op::MARK);
        for (const PickleValue& item : v.items_) save(item);
        out_.push_back(n == 1 ? op::TUPLE1 : n == 2 ? op::TUPLE2 : n == 3 ? op::TUPLE3 : op::TUPLE);
        break;
      }
      case K::List:
        out_.push_back(op::EMPTY_LIST);
        saveBatched(v.items_, 1, op::APPEND, op::APPENDS);
        break;
      case K::Dict:
        out_.push_back(op::EMPTY_DICT);
        saveBatched(v.items_, 2, op::SETITEM, op::SETITEMS);
        break;
    }
  }

  std::string out_;
  std::unordered_map<std::string, StringUse> strings_;
  std::int64_t nextMemo_ = 0;
};

std::string PickleValue::dumps() const { return PickleWriter().dumps(*this); }

// --- MemoryHistory -------------------------------------------------------------------------------
namespace {

using DeviceKey = std::pair<int, int>;
DeviceKey keyOf(Device d) { return {static_cast<int>(d.type()), d.index()}; }
Device deviceOf(DeviceKey k) { return Device(static_cast<DeviceType>(k.first), k.second); }

PickleValue frame(const std::string& name, std::int64_t line) {
  PickleValue f = PickleValue::dict();
  f.set("filename", "gpulab");
  f.set("line", line);
  f.set("name", name);
  return f;
}

// What the memory is for, in frames: the category, then the training step (see the header).
PickleValue framesFor(MemoryCategory category, std::int64_t step) {
  PickleValue frames = PickleValue::list();
  frames.append(frame(memoryCategoryName(category), 0));
  if (step > 0) frames.append(frame("step " + std::to_string(step), step));
  return frames;
}

// The bytes the cap left free after the event: what PyTorch's oom entry calls device_free.
std::int64_t deviceFree(const CachingAllocator& a, const MemoryEvent& e) {
  const std::int64_t cap = a.effectiveCap() > 0 ? a.effectiveCap() : a.capacity().total;
  return std::max<std::int64_t>(0, cap - e.reserved_bytes);
}

}  // namespace

MemoryHistory::MemoryHistory(std::size_t maxEntries)
    : scope_(Scope::All), maxEntries_(std::max<std::size_t>(1, maxEntries)), recorder_(std::make_unique<MemoryEventRecorder>()) {}

MemoryHistory::MemoryHistory(Device device, std::size_t maxEntries)
    : scope_(Scope::OneDevice),
      device_(device),
      maxEntries_(std::max<std::size_t>(1, maxEntries)),
      recorder_(std::make_unique<MemoryEventRecorder>(device)) {}

MemoryHistory::MemoryHistory(CachingAllocator& allocator, std::size_t maxEntries)
    : scope_(Scope::OneAllocator),
      device_(allocator.device()),
      allocator_(&allocator),
      maxEntries_(std::max<std::size_t>(1, maxEntries)),
      recorder_(std::make_unique<MemoryEventRecorder>(allocator.device())) {}

MemoryHistory::~MemoryHistory() = default;

void MemoryHistory::collect() const {
  for (const MemoryEvent& e : recorder_->drain()) {
    std::deque<Entry>& trace = traces_[keyOf(e.device)];
    switch (e.kind) {
      case MemoryEventKind::Allocate: trace.push_back({e, "alloc"}); break;
      case MemoryEventKind::Free:
        trace.push_back({e, "free_requested"});
        trace.push_back({e, "free_completed"});
        break;
      case MemoryEventKind::SegmentReserve: trace.push_back({e, "segment_alloc"}); break;
      case MemoryEventKind::SegmentRelease: trace.push_back({e, "segment_free"}); break;
      case MemoryEventKind::OutOfMemory: trace.push_back({e, "oom"}); break;
      case MemoryEventKind::EmptyCache: break;  // its segment_free entries are its trace
    }
    while (trace.size() > maxEntries_) trace.pop_front();
  }
}

std::size_t MemoryHistory::entryCount(Device device) const {
  std::lock_guard lock(mutex_);
  collect();
  const auto it = traces_.find(keyOf(device));
  return it == traces_.end() ? 0 : it->second.size();
}

PickleValue MemoryHistory::snapshot() const {
  std::lock_guard lock(mutex_);
  // The events first, then the allocators' state: an event that lands in between shows as memory
  // that existed before the history, never as a trace entry the state does not explain.
  collect();

  // The devices this history covers, with their allocators.
  std::vector<std::pair<Device, const CachingAllocator*>> candidates;
  switch (scope_) {
    case Scope::OneAllocator: candidates.emplace_back(device_, allocator_); break;
    case Scope::OneDevice: candidates.emplace_back(device_, &allocatorFor(device_)); break;
    case Scope::All: {
      for (const cuda::DeviceChoice& choice : cuda::availableDevices()) candidates.emplace_back(choice.device, &allocatorFor(choice.device));
      for (const auto& [key, trace] : traces_) {
        const Device d = deviceOf(key);
        const bool listed = std::any_of(candidates.begin(), candidates.end(), [d](const auto& c) { return c.first == d; });
        if (!listed) candidates.emplace_back(d, &allocatorFor(d));
      }
      break;
    }
  }
  struct Exported {
    Device device;
    const CachingAllocator* allocator;
    std::vector<AllocatorSegmentInfo> segments;
    const std::deque<Entry>* trace;
    int index = 0;
  };
  static const std::deque<Entry> kNoEntries;
  std::vector<Exported> exported;
  for (const auto& [device, allocator] : candidates) {
    const auto it = traces_.find(keyOf(device));
    Exported e{device, allocator, allocator->segments(), it == traces_.end() ? &kNoEntries : &it->second};
    // Every device of a one-device history; of all devices, those with memory or history.
    if (scope_ != Scope::All || !e.segments.empty() || !e.trace->empty()) exported.push_back(std::move(e));
  }
  if (exported.empty()) exported.push_back({kCPU, &allocatorFor(kCPU), {}, &kNoEntries});  // an empty snapshot still opens

  // PyTorch's device indices: CUDA devices keep theirs; the CPU is 0 alone, else after the last GPU.
  int maxCuda = -1;
  for (const Exported& e : exported)
    if (e.device.isCuda()) maxCuda = std::max(maxCuda, e.device.index());
  for (Exported& e : exported) e.index = e.device.isCuda() ? e.device.index() : maxCuda + 1;
  const int deviceCount = std::max_element(exported.begin(), exported.end(), [](const auto& a, const auto& b) { return a.index < b.index; })->index + 1;

  PickleValue segments = PickleValue::list();
  std::vector<PickleValue> traces(static_cast<std::size_t>(deviceCount), PickleValue::list());
  std::vector<PickleValue> names(static_cast<std::size_t>(deviceCount));
  for (const Exported& ex : exported) {
    names[static_cast<std::size_t>(ex.index)] = scope_ == Scope::OneAllocator ? ex.device.str() : cuda::deviceLabel(ex.device);
    // The trace, and which recorded allocation each live block comes from.
    std::unordered_map<std::uintptr_t, const MemoryEvent*> liveAllocs;
    PickleValue& trace = traces[static_cast<std::size_t>(ex.index)];
    for (const Entry& entry : *ex.trace) {
      const MemoryEvent& e = entry.event;
      const bool oom = e.kind == MemoryEventKind::OutOfMemory;
      PickleValue t = PickleValue::dict();
      t.set("action", entry.action);
      t.set("addr", static_cast<unsigned long long>(e.address));
      if (oom) t.set("device_free", deviceFree(*ex.allocator, e));
      t.set("size", e.size);
      t.set("stream", static_cast<unsigned long long>(e.stream));
      t.set("time_us", static_cast<std::int64_t>(e.time_s * 1e6));
      t.set("frames", framesFor(e.category, e.step));
      trace.append(std::move(t));
      if (e.kind == MemoryEventKind::Allocate) liveAllocs[e.address] = &e;
      else if (e.kind == MemoryEventKind::Free) liveAllocs.erase(e.address);
    }
    for (const AllocatorSegmentInfo& seg : ex.segments) {
      std::int64_t allocated = 0, requested = 0;
      PickleValue blocks = PickleValue::list();
      for (const AllocatorBlockInfo& b : seg.blocks) {
        PickleValue block = PickleValue::dict();
        block.set("address", static_cast<unsigned long long>(b.address));
        block.set("size", b.size);
        block.set("requested_size", b.allocated ? b.requested_size : b.size);
        block.set("state", b.allocated ? "active_allocated" : "inactive");
        if (!b.allocated) block.set("frames", PickleValue::list());
        else if (const auto it = liveAllocs.find(b.address); it != liveAllocs.end()) block.set("frames", framesFor(it->second->category, it->second->step));
        else block.set("frames", framesFor(b.category, 0));
        blocks.append(std::move(block));
        if (b.allocated) {
          allocated += b.size;
          requested += b.requested_size;
        }
      }
      PickleValue s = PickleValue::dict();
      s.set("device", ex.index);
      s.set("address", static_cast<unsigned long long>(seg.address));
      s.set("total_size", seg.total_size);
      s.set("allocated_size", allocated);
      s.set("active_size", allocated);
      s.set("requested_size", requested);
      s.set("stream", static_cast<unsigned long long>(seg.stream));
      s.set("segment_type", seg.small ? "small" : "large");
      s.set("segment_pool_id", PickleValue::tuple({0, 0}));
      s.set("is_expandable", false);
      s.set("frames", PickleValue::list());
      s.set("blocks", std::move(blocks));
      segments.append(std::move(s));
    }
  }

  PickleValue gpulab = PickleValue::dict();
  gpulab.set("devices", PickleValue::list(std::move(names)));
  gpulab.set("frames", "frames hold GPU Lab's memory category (gpulab:0:<category>) and the training step (gpulab:N:step N)");
  PickleValue snap = PickleValue::dict();
  snap.set("segments", std::move(segments));
  snap.set("device_traces", PickleValue::list(std::move(traces)));
  snap.set("allocator_settings", PickleValue::dict());
  snap.set("gpulab", std::move(gpulab));
  return snap;
}

std::string MemoryHistory::snapshotPickle() const { return snapshot().dumps(); }

void MemoryHistory::writeSnapshot(const std::string& path) const {
  auto fail = [&path](int err) {
    throw IOError("cannot write the memory snapshot '" + path + "': " + std::generic_category().message(err));
  };
  if (path.empty()) throw IOError("cannot write the memory snapshot: the path is empty");
  const std::string data = snapshotPickle();
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string temp = (dir / ("." + target.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) fail(errno);
  std::size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      fail(err);
    }
    written += static_cast<std::size_t>(n);
  }
  // mkstemp makes the file 0600; a snapshot is an ordinary file, as _dump_snapshot's open() makes it.
  ::fchmod(fd, 0644);
  const int syncErr = ::fsync(fd) != 0 ? errno : 0;
  const int closeErr = ::close(fd) != 0 ? errno : 0;
  if (syncErr || closeErr) {
    ::unlink(temp.c_str());
    fail(syncErr ? syncErr : closeErr);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    fail(err);
  }
}

}  // namespace gpulab
