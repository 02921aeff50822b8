#include "engine/runtime/memory_snapshot.h"

#include "engine/core/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <unordered_map>

#include "engine/core/errors.h"
#include "engine/memory/caching_allocator.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"

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

constexpr std::size_t kBatch = 1000;  // pickle's _BATCHSIZE

void PickleWriter::le(std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) put(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PickleWriter::memoOp(char shortOp, char longOp, std::int64_t slot) {
  if (slot < 256) {
    put(shortOp);
    put(static_cast<char>(slot));
  } else {
    put(longOp);
    le(static_cast<std::uint64_t>(slot), 4);
  }
}

// Before an item: a list or dict of more than one item opens each batch of 1000 with MARK; a tuple of
// more than three items opens with MARK.
void PickleWriter::beforeItem() {
  if (open_.empty()) throw Error("PickleWriter: a value after the end of the pickle");
  Open& o = open_.back();
  if (o.written >= (o.kind == 'd' ? 2 * o.n : o.n)) throw Error("PickleWriter: more items than the container said");
  const bool mark = (o.kind == 'l' && o.n > 1 && o.written % kBatch == 0) ||
                    (o.kind == 'd' && o.n > 1 && o.written % (2 * kBatch) == 0) || (o.kind == 't' && o.n > 3 && o.written == 0);
  if (mark) put(op::MARK);
}

// After an item: one item is APPEND/SETITEM; more close each batch with APPENDS/SETITEMS (a last batch
// of one included), as the C pickler does.
void PickleWriter::afterItem() {
  Open& o = open_.back();
  ++o.written;
  if (o.kind == 'l') {
    if (o.n == 1) put(op::APPEND);
    else if (o.written % kBatch == 0 || o.written == o.n) put(op::APPENDS);
  } else if (o.kind == 'd' && o.written % 2 == 0) {
    const std::size_t pairs = o.written / 2;
    if (o.n == 1) put(op::SETITEM);
    else if (pairs % kBatch == 0 || pairs == o.n) put(op::SETITEMS);
  } else if (o.kind == 'r') {
    put(op::STOP);
  }
}

void PickleWriter::none() {
  beforeItem();
  put(op::NONE);
  afterItem();
}

void PickleWriter::value(bool b) {
  beforeItem();
  put(b ? op::NEWTRUE : op::NEWFALSE);
  afterItem();
}

// Python's encode_long: the fewest little-endian two's-complement bytes that hold the value, for a
// value given as its 64-bit pattern and sign (byte 8, when needed, is the sign extension).
void PickleWriter::saveLong(std::uint64_t bits64, bool negative) {
  const std::uint64_t magnitude = negative ? 0 - bits64 : bits64;
  int n = static_cast<int>(std::bit_width(magnitude) >> 3) + 1;
  auto byteAt = [bits64, negative](int i) {
    return static_cast<unsigned char>(i < 8 ? (bits64 >> (8 * i)) & 0xff : negative ? 0xff : 0);
  };
  if (negative && n > 1 && byteAt(n - 1) == 0xff && (byteAt(n - 2) & 0x80)) --n;
  put(op::LONG1);
  put(static_cast<char>(n));
  for (int i = 0; i < n; ++i) put(static_cast<char>(byteAt(i)));
}

void PickleWriter::value(std::uint64_t v) {
  beforeItem();
  if (v < 256) {
    put(op::BININT1);
    le(v, 1);
  } else if (v < 65536) {
    put(op::BININT2);
    le(v, 2);
  } else if (v < (std::uint64_t{1} << 31)) {
    put(op::BININT);
    le(v, 4);
  } else {
    saveLong(v, false);
  }
  afterItem();
}

void PickleWriter::value(std::int64_t v) {
  if (v >= 0) return value(static_cast<std::uint64_t>(v));
  beforeItem();
  if (v >= -(std::int64_t{1} << 31)) {
    put(op::BININT);
    le(static_cast<std::uint64_t>(v), 4);
  } else {
    saveLong(static_cast<std::uint64_t>(v), true);
  }
  afterItem();
}

void PickleWriter::value(double f) {
  beforeItem();
  put(op::BINFLOAT);
  const auto bits = std::bit_cast<std::uint64_t>(f);
  for (int i = 7; i >= 0; --i) put(static_cast<char>((bits >> (8 * i)) & 0xff));
  afterItem();
}

void PickleWriter::str(std::string_view s) {
  beforeItem();
  auto it = strings_.find(std::string(s));
  if (!writing_) {
    if (it == strings_.end()) it = strings_.emplace(std::string(s), StringUse{}).first;
    ++it->second.count;
  } else if (it->second.memo >= 0) {
    memoOp(op::BINGET, op::LONG_BINGET, it->second.memo);
  } else {
    put(op::BINUNICODE);
    le(s.size(), 4);
    out_.append(s);
    if (it->second.count > 1) {
      it->second.memo = nextMemo_++;
      memoOp(op::BINPUT, op::LONG_BINPUT, it->second.memo);
    }
  }
  afterItem();
}

void PickleWriter::begin(char kind, std::size_t n, char opcode) {
  beforeItem();
  if (opcode) put(opcode);
  open_.push_back({kind, n});
}

void PickleWriter::beginList(std::size_t n) { begin('l', n, op::EMPTY_LIST); }
void PickleWriter::beginTuple(std::size_t n) { begin('t', n, 0); }
void PickleWriter::beginDict(std::size_t n) { begin('d', n, op::EMPTY_DICT); }

void PickleWriter::end() {
  if (open_.size() < 2) throw Error("PickleWriter: end() without a container");
  const Open o = open_.back();
  if (o.written != (o.kind == 'd' ? 2 * o.n : o.n)) throw Error("PickleWriter: fewer items than the container said");
  open_.pop_back();
  if (o.kind == 't') put(o.n == 0 ? op::EMPTY_TUPLE : o.n == 1 ? op::TUPLE1 : o.n == 2 ? op::TUPLE2 : o.n == 3 ? op::TUPLE3 : op::TUPLE);
  afterItem();
}

void PickleWriter::finish() {
  if (open_.size() != 1 || open_.back().written != 1) throw Error("PickleWriter: the pickle holds no complete value");
}

std::string pickleDumps(const std::function<void(PickleWriter&)>& emit) {
  PickleWriter w;
  for (const bool writing : {false, true}) {
    w.writing_ = writing;
    w.open_.assign(1, {'r', 1});
    w.put(op::PROTO);
    w.put('\x02');
    emit(w);
    w.finish();
  }
  return std::move(w.out_);
}

void PickleValue::writeTo(PickleWriter& w) const {
  switch (kind_) {
    case Kind::None: w.none(); break;
    case Kind::Bool: w.value(int_ != 0); break;
    case Kind::Int: w.value(int_); break;
    case Kind::UInt: w.value(uint_); break;
    case Kind::Float: w.value(float_); break;
    case Kind::Str: w.str(str_); break;
    case Kind::List:
    case Kind::Tuple:
    case Kind::Dict:
      if (kind_ == Kind::List) w.beginList(items_.size());
      else if (kind_ == Kind::Tuple) w.beginTuple(items_.size());
      else w.beginDict(items_.size() / 2);
      for (const PickleValue& item : items_) item.writeTo(w);
      w.end();
      break;
  }
}

std::string PickleValue::dumps() const {
  return pickleDumps([this](PickleWriter& w) { writeTo(w); });
}

// Builds a PickleValue from the writer's calls: how snapshot() and snapshotPickle() share one
// description of the snapshot (emitSnapshot below).
class PickleBuilder {
 public:
  void none() { add(PickleValue()); }
  void value(int i) { add(PickleValue(i)); }
  void value(bool b) { add(PickleValue(b)); }
  void value(std::int64_t i) { add(PickleValue(i)); }
  void value(std::uint64_t u) { add(PickleValue(u)); }
  void value(double f) { add(PickleValue(f)); }
  void str(std::string_view s) { add(PickleValue(std::string(s))); }
  void beginList(std::size_t n) { open(PickleValue::list(), n); }
  void beginTuple(std::size_t n) { open(PickleValue::tuple(), n); }
  void beginDict(std::size_t n) { open(PickleValue::dict(), 2 * n); }
  void end() {
    PickleValue done = std::move(stack_.back());
    stack_.pop_back();
    add(std::move(done));
  }
  PickleValue result() { return std::move(root_); }

 private:
  void open(PickleValue v, std::size_t n) {
    v.items_.reserve(n);
    stack_.push_back(std::move(v));
  }
  void add(PickleValue v) {
    if (stack_.empty()) root_ = std::move(v);
    else stack_.back().items_.push_back(std::move(v));
  }
  std::vector<PickleValue> stack_;
  PickleValue root_;
};

// --- MemoryHistory -------------------------------------------------------------------------------
namespace {

using DeviceKey = std::pair<int, int>;
DeviceKey keyOf(Device d) { return {static_cast<int>(d.type()), d.index()}; }
Device deviceOf(DeviceKey k) { return Device(static_cast<DeviceType>(k.first), k.second); }

template <class Out>
void emitFrame(Out& out, std::string_view name, std::int64_t line) {
  out.beginDict(3);
  out.str("filename");
  out.str("gpulab");
  out.str("line");
  out.value(line);
  out.str("name");
  out.str(name);
  out.end();
}

// What the memory is for, in frames: the category, then the training step (see the header).
template <class Out>
void emitFrames(Out& out, MemoryCategory category, std::int64_t step) {
  out.beginList(step > 0 ? 2 : 1);
  emitFrame(out, memoryCategoryName(category), 0);
  if (step > 0) emitFrame(out, "step " + std::to_string(step), step);
  out.end();
}

template <class Out>
void emitKey(Out& out, std::string_view key, std::uint64_t v) {
  out.str(key);
  out.value(v);
}
template <class Out>
void emitKey(Out& out, std::string_view key, std::int64_t v) {
  out.str(key);
  out.value(v);
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
    std::deque<TraceEntry>& trace = traces_[keyOf(e.device)];
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

void MemoryHistory::setMaxEntries(std::size_t maxEntries) {
  std::lock_guard lock(mutex_);
  collect();  // what was recorded under the old bound is kept as that bound allowed
  maxEntries_ = maxEntries;
  for (auto& [key, trace] : traces_) {
    while (trace.size() > maxEntries_) trace.pop_front();
  }
}

std::size_t MemoryHistory::entryCount(Device device) const {
  std::lock_guard lock(mutex_);
  collect();
  const auto it = traces_.find(keyOf(device));
  return it == traces_.end() ? 0 : it->second.size();
}

// Everything a snapshot shows, gathered once under the lock, so that the pickle's two passes and the
// tree describe the same state.
struct MemoryHistory::Gathered {
  struct Exported {
    Device device;
    std::string name;
    std::vector<AllocatorSegmentInfo> segments;
    const std::deque<TraceEntry>* trace = nullptr;
    std::unordered_map<std::uintptr_t, const MemoryEvent*> liveAllocs;  // address -> its recorded allocation
    int index = 0;
  };
  std::vector<Exported> devices;
  int deviceCount = 0;
};

MemoryHistory::Gathered MemoryHistory::gather() const {
  // The events first, then the allocators' state: an event that lands in between shows as memory
  // that existed before the history, never as a trace entry the state does not explain.
  collect();
  static const std::deque<TraceEntry> kNoEntries;

  // The devices this history covers, with their allocators. (Getting a real GPU's allocator creates
  // no CUDA context; reading its segments calls no CUDA function.)
  std::vector<std::pair<Device, const CachingAllocator*>> candidates;
  switch (scope_) {
    case Scope::OneAllocator: candidates.emplace_back(device_, allocator_); break;
    case Scope::OneDevice: candidates.emplace_back(device_, &allocatorFor(device_)); break;
    case Scope::All: {
      for (const cuda::DeviceChoice& choice : cuda::availableDevices()) candidates.emplace_back(choice.device, &allocatorFor(choice.device));
      for (const auto& [key, trace] : traces_) {
        const Device d = deviceOf(key);
        if (std::none_of(candidates.begin(), candidates.end(), [d](const auto& c) { return c.first == d; }))
          candidates.emplace_back(d, &allocatorFor(d));
      }
      break;
    }
  }
  Gathered g;
  for (const auto& [device, allocator] : candidates) {
    const auto it = traces_.find(keyOf(device));
    Gathered::Exported e;
    e.device = device;
    e.name = scope_ == Scope::OneAllocator ? device.str() : cuda::deviceLabel(device);
    e.segments = allocator->segments();
    e.trace = it == traces_.end() ? &kNoEntries : &it->second;
    // Every device of a one-device history; of all devices, those with memory or history.
    if (scope_ == Scope::All && e.segments.empty() && e.trace->empty()) continue;
    for (const TraceEntry& entry : *e.trace) {
      if (entry.event.kind == MemoryEventKind::Allocate) e.liveAllocs[entry.event.address] = &entry.event;
      else if (entry.event.kind == MemoryEventKind::Free) e.liveAllocs.erase(entry.event.address);
    }
    g.devices.push_back(std::move(e));
  }
  if (g.devices.empty()) {  // an empty snapshot still opens: the CPU, with nothing
    Gathered::Exported e;
    e.device = kCPU;
    e.name = kCPU.str();
    e.trace = &kNoEntries;
    g.devices.push_back(std::move(e));
  }
  // PyTorch's device indices: CUDA devices keep theirs; the CPU is 0 alone, else after the last GPU.
  int maxCuda = -1;
  for (const Gathered::Exported& e : g.devices)
    if (e.device.isCuda()) maxCuda = std::max(maxCuda, e.device.index());
  for (Gathered::Exported& e : g.devices) {
    e.index = e.device.isCuda() ? e.device.index() : maxCuda + 1;
    g.deviceCount = std::max(g.deviceCount, e.index + 1);
  }
  return g;
}

namespace {

// The snapshot dict, written to a PickleWriter or a PickleBuilder (see the header for the format).
template <class Out>
void emitSnapshot(Out& out, const MemoryHistory::Gathered& g) {
  std::size_t segmentCount = 0;
  for (const auto& ex : g.devices) segmentCount += ex.segments.size();
  out.beginDict(4);

  out.str("segments");
  out.beginList(segmentCount);
  for (const auto& ex : g.devices) {
    for (const AllocatorSegmentInfo& seg : ex.segments) {
      std::int64_t allocated = 0, requested = 0;
      for (const AllocatorBlockInfo& b : seg.blocks) {
        if (!b.allocated) continue;
        allocated += b.size;
        requested += b.requested_size;
      }
      out.beginDict(12);
      emitKey(out, "device", std::int64_t{ex.index});
      emitKey(out, "address", std::uint64_t{seg.address});
      emitKey(out, "total_size", seg.total_size);
      emitKey(out, "allocated_size", allocated);
      emitKey(out, "active_size", allocated);
      emitKey(out, "requested_size", requested);
      emitKey(out, "stream", std::uint64_t{seg.stream});
      out.str("segment_type");
      out.str(seg.small ? "small" : "large");
      out.str("segment_pool_id");
      out.beginTuple(2);
      out.value(0);
      out.value(0);
      out.end();
      out.str("is_expandable");
      out.value(false);
      out.str("frames");
      out.beginList(0);
      out.end();
      out.str("blocks");
      out.beginList(seg.blocks.size());
      for (const AllocatorBlockInfo& b : seg.blocks) {
        out.beginDict(5);
        emitKey(out, "address", std::uint64_t{b.address});
        emitKey(out, "size", b.size);
        emitKey(out, "requested_size", b.allocated ? b.requested_size : b.size);
        out.str("state");
        out.str(b.allocated ? "active_allocated" : "inactive");
        out.str("frames");
        if (!b.allocated) {
          out.beginList(0);
          out.end();
        } else if (const auto it = ex.liveAllocs.find(b.address); it != ex.liveAllocs.end()) {
          emitFrames(out, it->second->category, it->second->step);
        } else {
          emitFrames(out, b.category, 0);
        }
        out.end();
      }
      out.end();
      out.end();
    }
  }
  out.end();

  out.str("device_traces");
  out.beginList(static_cast<std::size_t>(g.deviceCount));
  for (int index = 0; index < g.deviceCount; ++index) {
    const auto ex = std::find_if(g.devices.begin(), g.devices.end(), [index](const auto& e) { return e.index == index; });
    out.beginList(ex == g.devices.end() ? 0 : ex->trace->size());
    if (ex != g.devices.end()) {
      for (const MemoryHistory::TraceEntry& entry : *ex->trace) {
        const MemoryEvent& e = entry.event;
        const bool oom = e.kind == MemoryEventKind::OutOfMemory;
        out.beginDict(oom ? 7 : 6);
        out.str("action");
        out.str(entry.action);
        // An OOM event's address is the bytes the cap or the device left free (caching_allocator.h).
        emitKey(out, "addr", std::uint64_t{oom ? 0 : e.address});
        if (oom) emitKey(out, "device_free", std::uint64_t{e.address});
        emitKey(out, "size", e.size);
        emitKey(out, "stream", std::uint64_t{e.stream});
        emitKey(out, "time_us", static_cast<std::int64_t>(e.time_s * 1e6));
        out.str("frames");
        emitFrames(out, e.category, e.step);
        out.end();
      }
    }
    out.end();
  }
  out.end();

  out.str("allocator_settings");
  out.beginDict(0);
  out.end();

  out.str("gpulab");
  out.beginDict(2);
  out.str("devices");
  out.beginList(static_cast<std::size_t>(g.deviceCount));
  for (int index = 0; index < g.deviceCount; ++index) {
    const auto ex = std::find_if(g.devices.begin(), g.devices.end(), [index](const auto& e) { return e.index == index; });
    if (ex == g.devices.end()) out.none();
    else out.str(ex->name);
  }
  out.end();
  out.str("frames");
  out.str("frames hold GPU Lab's memory category (gpulab:0:<category>) and the training step (gpulab:N:step N)");
  out.end();

  out.end();
}

}  // namespace

PickleValue MemoryHistory::snapshot() const {
  std::lock_guard lock(mutex_);
  const Gathered g = gather();
  PickleBuilder builder;
  emitSnapshot(builder, g);
  return builder.result();
}

std::string MemoryHistory::snapshotPickle() const {
  std::lock_guard lock(mutex_);
  const Gathered g = gather();
  return pickleDumps([&g](PickleWriter& w) { emitSnapshot(w, g); });
}

void MemoryHistory::writeSnapshot(const std::string& path) const {
  if (path.empty()) throw IOError("cannot write the memory snapshot: the path is empty");
  writeFileAtomically(path, snapshotPickle(), "the memory snapshot");
}

}  // namespace gpulab
