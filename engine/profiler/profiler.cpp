#include "engine/profiler/profiler.h"

#include "engine/core/atomic_file.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "engine/core/errors.h"
#include "engine/core/tensor.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/stream.h"

namespace gpulab::profiler {

namespace detail {
std::atomic<bool> recording{false};
}

namespace {

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A device op's two timing events, read when the Profile stops.
struct DeviceSpan {
  std::size_t event = 0;  // its index in Collector::events
  std::shared_ptr<cuda::Event> start, end;
};
// Each device's first event: its stream's time for it is mapped to the host's time it was recorded at.
struct DeviceOrigin {
  std::shared_ptr<cuda::Event> event;
  double hostUs = 0;  // since the Profile started
};

// Where finished events go while a Profile records.
struct Collector {
  std::mutex mutex;
  bool active = false;
  ProfileOptions options;
  double startUs = 0;
  std::vector<Event> events;
  std::map<std::thread::id, std::uint64_t> threads;
  std::vector<DeviceSpan> spans;
  std::map<std::string, DeviceOrigin> origins;  // by device ("cuda:0")
  std::uint64_t generation = 0;  // which Profile: one more for each
  bool nvtx = false;             // a CUDA module is loaded and a GPU usable: each op is an NVTX range too
};
Collector& collector() {
  static Collector* c = new Collector;  // never destroyed: scopes may end while the process exits
  return *c;
}

// The scopes open on this thread, innermost last.
struct Open {
  std::string name, shapes;
  double startUs = 0, childUs = 0;
  std::int64_t memoryAtStart = 0, childMemory = 0;
  std::optional<Device> device;  // a CUDA device whose stream the op queues work on
  std::shared_ptr<cuda::Event> deviceStart;
  bool nvtx = false;  // pushed an NVTX range, to pop
  bool profiled = false;  // begun while a Profile recorded (else only the run's record noted it)
};

// Waits until `e` has been reached without reporting the device's errors: they are the program's, raised
// at its next synchronisation (a profile must not swallow an out-of-range label's IndexError).
void waitQuietly(const cuda::Event& e) {
  while (!e.query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// A timing event recorded now on `device`'s current stream; null if it cannot be (profiling must not
// break the op it watches).
std::shared_ptr<cuda::Event> markDevice(Device device) {
  try {
    auto e = std::make_shared<cuda::Event>(true);
    e->record(cuda::current_stream(device));
    return e;
  } catch (const std::exception&) {
    return nullptr;
  }
}
thread_local std::vector<Open> openScopes;

std::string shapeList(std::initializer_list<const Tensor*> inputs) {
  std::string s = "[";
  bool first = true;
  for (const Tensor* t : inputs) {
    if (!first) s += ", ";
    first = false;
    s += "[";
    if (t && t->defined()) {
      for (std::int64_t d = 0; d < t->dim(); ++d) s += (d ? ", " : "") + std::to_string(t->size(d));
    }
    s += "]";
  }
  return s + "]";
}

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

// PyTorch's table units: "1.234s", "12.345ms", "123.456us"; "1.50 Mb", "512 b".
std::string formatUs(double us) {
  char buf[32];
  if (us >= 1e6) std::snprintf(buf, sizeof buf, "%.3fs", us / 1e6);
  else if (us >= 1e3) std::snprintf(buf, sizeof buf, "%.3fms", us / 1e3);
  else std::snprintf(buf, sizeof buf, "%.3fus", us);
  return buf;
}
std::string formatMemory(std::int64_t bytes) {
  const double b = static_cast<double>(bytes), a = std::abs(b);
  char buf[32];
  if (a >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f Gb", b / (1024.0 * 1024 * 1024));
  else if (a >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f Mb", b / (1024.0 * 1024));
  else if (a >= 1024.0) std::snprintf(buf, sizeof buf, "%.2f Kb", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%" PRId64 " b", bytes);
  return buf;
}
std::string percent(double part, double whole) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.2f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

}  // namespace

void RecordScope::begin(const char* name, std::initializer_list<const Tensor*> inputs, const Device* on) {
  Collector& c = collector();
  Open o;
  o.startUs = nowUs();  // the profiler's own work for the op counts as the op's, not its caller's
  if (on && on->isCuda()) o.device = *on;
  for (const Tensor* t : inputs) {
    if (!o.device && t && t->defined() && t->is_cuda()) o.device = t->device();
  }
  if (run_record::recording()) run_record::noteOp(name, o.device, static_cast<int>(openScopes.size()), shapeList(inputs));
  o.profiled = isProfiling();
  active_ = true;
  if (!o.profiled) {  // only the run's record wants it: the scope keeps the nesting, nothing more
    openScopes.push_back(std::move(o));
    return;
  }
  o.name = name;
  if (!c.options.record_device) o.device.reset();  // fixed while recording: one Profile at a time
  if (o.device) {
    // The device's first op of this profile also records its origin: the stream's clock mapped to the
    // host's. Claimed under the lock, recorded outside it, filled in only if the same profile still runs.
    const std::string key = o.device->str();
    std::uint64_t generation = 0;
    {
      std::lock_guard lock(c.mutex);
      if (c.active && !c.origins.count(key)) {
        c.origins[key] = {};
        generation = c.generation;
      }
    }
    if (generation) {
      auto origin = markDevice(*o.device);
      const double hostUs = nowUs();
      std::lock_guard lock(c.mutex);
      if (c.active && c.generation == generation) c.origins[key] = {origin, hostUs - c.startUs};
    }
    o.deviceStart = markDevice(*o.device);
  }
  // The options cannot change while recording (one Profile at a time), so reading them unlocked is safe
  // once `recording` was seen true.
  if (c.options.record_shapes) o.shapes = shapeList(inputs);
  if (c.options.profile_memory) o.memoryAtStart = memory_allocated(kCPU);
  o.nvtx = c.nvtx;
  openScopes.push_back(std::move(o));
  if (openScopes.back().nvtx) cuda::rangePush(name);  // Nsight Systems' view of the same op (NVTX), last: it cannot throw
}

void RecordScope::end() {
  const double endUs = nowUs();
  Collector& c = collector();
  Open o = std::move(openScopes.back());
  openScopes.pop_back();
  if (!o.profiled) return;
  if (o.nvtx) cuda::rangePop();
  Event e;
  e.name = std::move(o.name);
  e.shapes = std::move(o.shapes);
  e.durationUs = endUs - o.startUs;
  e.selfUs = std::max(0.0, e.durationUs - o.childUs);
  e.depth = static_cast<int>(openScopes.size());
  if (c.options.profile_memory) {
    e.memoryBytes = memory_allocated(kCPU) - o.memoryAtStart;
    e.selfMemoryBytes = e.memoryBytes - o.childMemory;
  }
  if (!openScopes.empty()) {
    openScopes.back().childUs += e.durationUs;
    openScopes.back().childMemory += e.memoryBytes;
  }
  if (!isProfiling()) return;  // the Profile stopped while this op ran
  std::shared_ptr<cuda::Event> deviceEnd = o.deviceStart ? markDevice(*o.device) : nullptr;
  std::lock_guard lock(c.mutex);
  if (!c.active) return;
  e.startUs = o.startUs - c.startUs;
  auto [it, inserted] = c.threads.emplace(std::this_thread::get_id(), c.threads.size());
  e.thread = it->second;
  if (deviceEnd) {
    e.device = o.device->str();
    if (const auto stream = o.deviceStart->stream()) e.deviceStream = stream->id();
    c.spans.push_back({c.events.size(), o.deviceStart, deviceEnd});
  }
  c.events.push_back(std::move(e));
}

Profile::Profile(ProfileOptions options) : options_(options) {
  // Before the clock starts: the first call loads the CUDA module, which must not count as profiled time.
  const bool nvtx = cuda::isAvailable();
  Collector& c = collector();
  std::lock_guard lock(c.mutex);
  if (c.active) throw Error("profiler: another profile is already recording (one torch.profiler.profile at a time)");
  c.active = true;
  c.options = options;
  c.events.clear();
  c.threads.clear();
  c.spans.clear();
  c.origins.clear();
  ++c.generation;
  c.nvtx = nvtx;
  c.startUs = startUs_ = nowUs();
  detail::recording.store(true, std::memory_order_release);
}

Profile::~Profile() { stop(); }

void Profile::stop() {
  if (stopped_) return;
  stopped_ = true;
  detail::recording.store(false, std::memory_order_release);
  Collector& c = collector();
  std::vector<DeviceSpan> spans;
  std::map<std::string, DeviceOrigin> origins;
  {
    std::lock_guard lock(c.mutex);
    stopUs_ = nowUs();
    events_ = std::move(c.events);
    spans = std::move(c.spans);
    origins = std::move(c.origins);
    c.events.clear();
    c.spans.clear();
    c.origins.clear();
    c.active = false;
  }
  // The device times, once the streams have run what the ops queued (outside the lock: this waits).
  for (const DeviceSpan& d : spans) {
    Event& e = events_[d.event];
    try {
      waitQuietly(*d.end);
      e.deviceUs = std::max(0.0, d.start->elapsed_time(*d.end) * 1000.0);
    } catch (const std::exception&) {
      e.device.clear();  // a device error since: no time for this op (the error is the program's to see)
      e.deviceUs = 0;
      continue;
    }
    // Where the span lies on the host's clock: from the device's origin, or else at its launch.
    e.deviceStartUs = e.startUs;
    try {
      const auto origin = origins.find(e.device);
      if (origin != origins.end() && origin->second.event) {
        waitQuietly(*origin->second.event);
        e.deviceStartUs = origin->second.hostUs + origin->second.event->elapsed_time(*d.start) * 1000.0;
      }
    } catch (const std::exception&) {
    }
  }
  // Self device time: less the direct children's, nesting read from the host's intervals per thread.
  std::vector<std::size_t> order(events_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {  // a parent before its child, also at one start time
    return std::tie(events_[a].thread, events_[a].startUs, events_[a].depth) < std::tie(events_[b].thread, events_[b].startUs, events_[b].depth);
  });
  std::vector<double> childDevice(events_.size(), 0.0);
  std::vector<std::size_t> open;
  for (const std::size_t i : order) {
    const Event& e = events_[i];
    while (!open.empty() && (events_[open.back()].thread != e.thread ||
                             events_[open.back()].startUs + events_[open.back()].durationUs <= e.startUs)) {
      open.pop_back();
    }
    if (!open.empty()) childDevice[open.back()] += e.deviceUs;
    if (!e.device.empty())
      for (const std::size_t ancestor : open) events_[ancestor].deviceChildren = true;
    open.push_back(i);
  }
  for (std::size_t i = 0; i < events_.size(); ++i) events_[i].selfDeviceUs = std::max(0.0, events_[i].deviceUs - childDevice[i]);
}

double Profile::wallUs() const { return (stopped_ ? stopUs_ : nowUs()) - startUs_; }

void Profile::step() {
  if (!stopped_) stepEndsUs_.push_back(nowUs() - startUs_);
}

const std::vector<Event>& Profile::events() const { return events_; }

KeyAverages Profile::key_averages(bool group_by_input_shape) const {
  KeyAverages k;
  k.withShapes = group_by_input_shape && options_.record_shapes;
  k.withMemory = options_.profile_memory;
  std::map<std::pair<std::string, std::string>, std::size_t> index;
  // In start order, so the rows come in the order the names first ran.
  std::vector<const Event*> byStart;
  for (const Event& e : events_) byStart.push_back(&e);
  std::stable_sort(byStart.begin(), byStart.end(), [](const Event* a, const Event* b) { return a->startUs < b->startUs; });
  for (const Event* e : byStart) {
    const auto key = std::make_pair(e->name, k.withShapes ? e->shapes : std::string());
    auto [it, inserted] = index.emplace(key, k.rows.size());
    if (inserted) k.rows.push_back({e->name, key.second});
    OpAverage& r = k.rows[it->second];
    ++r.count;
    r.cpuTimeTotalUs += e->durationUs;
    r.selfCpuTimeTotalUs += e->selfUs;
    r.cpuMemoryBytes += e->memoryBytes;
    r.selfCpuMemoryBytes += e->selfMemoryBytes;
    r.deviceTimeTotalUs += e->deviceUs;
    r.selfDeviceTimeTotalUs += e->selfDeviceUs;
    k.withDevice = k.withDevice || !e->device.empty();
  }
  return k;
}

double KeyAverages::selfCpuTimeTotalUs() const {
  double total = 0;
  for (const OpAverage& r : rows) total += r.selfCpuTimeTotalUs;
  return total;
}

double KeyAverages::selfDeviceTimeTotalUs() const {
  double total = 0;
  for (const OpAverage& r : rows) total += r.selfDeviceTimeTotalUs;
  return total;
}

std::vector<const OpAverage*> KeyAverages::sorted(const std::string& sort_by, int row_limit) const {
  using Key = double (*)(const OpAverage&);
  static const std::vector<std::pair<std::string, Key>> keys{
      {"cpu_time_total", [](const OpAverage& r) { return r.cpuTimeTotalUs; }},
      {"self_cpu_time_total", [](const OpAverage& r) { return r.selfCpuTimeTotalUs; }},
      {"cpu_time", [](const OpAverage& r) { return r.cpuTimeAvgUs(); }},
      {"cuda_time_total", [](const OpAverage& r) { return r.deviceTimeTotalUs; }},
      {"self_cuda_time_total", [](const OpAverage& r) { return r.selfDeviceTimeTotalUs; }},
      {"cuda_time", [](const OpAverage& r) { return r.deviceTimeAvgUs(); }},
      {"device_time_total", [](const OpAverage& r) { return r.deviceTimeTotalUs; }},
      {"self_device_time_total", [](const OpAverage& r) { return r.selfDeviceTimeTotalUs; }},
      {"device_time", [](const OpAverage& r) { return r.deviceTimeAvgUs(); }},
      {"count", [](const OpAverage& r) { return static_cast<double>(r.count); }},
      {"cpu_memory_usage", [](const OpAverage& r) { return static_cast<double>(r.cpuMemoryBytes); }},
      {"self_cpu_memory_usage", [](const OpAverage& r) { return static_cast<double>(r.selfCpuMemoryBytes); }},
  };
  Key key = nullptr;
  std::string known;
  for (const auto& [name, k] : keys) {
    if (name == sort_by) key = k;
    known += (known.empty() ? "" : ", ") + name;
  }
  if (!key) throw ValueError("profiler: cannot sort by '" + sort_by + "' (the keys: " + known + ")");
  std::vector<const OpAverage*> sorted;
  for (const OpAverage& r : rows) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(), [key](const OpAverage* a, const OpAverage* b) { return key(*a) > key(*b); });
  if (row_limit > 0 && sorted.size() > static_cast<std::size_t>(row_limit)) sorted.resize(static_cast<std::size_t>(row_limit));
  return sorted;
}

std::string KeyAverages::table(const std::string& sort_by, int row_limit) const {
  if (rows.empty()) return "";
  const std::vector<const OpAverage*> sorted = this->sorted(sort_by, row_limit);
  const double selfTotal = selfCpuTimeTotalUs(), selfDeviceTotal = selfDeviceTimeTotalUs();
  std::size_t nameWidth = 4;
  for (const OpAverage* r : sorted) nameWidth = std::max(nameWidth, r->name.size());
  nameWidth = std::min<std::size_t>(nameWidth, 60);
  std::vector<std::string> headers{"Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"};
  if (withDevice) {
    for (const char* h : {"Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"}) headers.push_back(h);
  }
  if (withMemory) {
    headers.push_back("CPU Mem");
    headers.push_back("Self CPU Mem");
  }
  headers.push_back("# of Calls");
  constexpr std::size_t kCol = 12;
  auto pad = [](const std::string& s, std::size_t w) { return s.size() >= w ? s : std::string(w - s.size(), ' ') + s; };
  auto cut = [](const std::string& s, std::size_t w) { return s.size() <= w ? s : s.substr(0, w - 3) + "..."; };
  std::string rule = std::string(nameWidth, '-');
  for (std::size_t i = 0; i < headers.size(); ++i) rule += "  " + std::string(kCol, '-');
  if (withShapes) rule += "  " + std::string(40, '-');
  std::string out = rule + "\n" + pad("Name", nameWidth);
  for (const std::string& h : headers) out += "  " + pad(h, kCol);
  if (withShapes) out += "  " + std::string("Input Shapes");
  out += "\n" + rule + "\n";
  for (const OpAverage* r : sorted) {
    out += pad(cut(r->name, nameWidth), nameWidth);
    std::vector<std::string> cells{percent(r->selfCpuTimeTotalUs, selfTotal), formatUs(r->selfCpuTimeTotalUs),
                                   percent(r->cpuTimeTotalUs, selfTotal), formatUs(r->cpuTimeTotalUs), formatUs(r->cpuTimeAvgUs())};
    if (withDevice) {
      for (const std::string& cell : {formatUs(r->selfDeviceTimeTotalUs), percent(r->selfDeviceTimeTotalUs, selfDeviceTotal),
                                      formatUs(r->deviceTimeTotalUs), formatUs(r->deviceTimeAvgUs())}) {
        cells.push_back(cell);
      }
    }
    if (withMemory) {
      cells.push_back(formatMemory(r->cpuMemoryBytes));
      cells.push_back(formatMemory(r->selfCpuMemoryBytes));
    }
    cells.push_back(std::to_string(r->count));
    for (const std::string& c : cells) out += "  " + pad(c, kCol);
    if (withShapes) out += "  " + r->shapes;
    out += "\n";
  }
  out += rule + "\nSelf CPU time total: " + formatUs(selfTotal) + "\n";
  if (withDevice) out += "Self CUDA time total: " + formatUs(selfDeviceTotal) + "\n";
  return out;
}

std::string Profile::chromeTraceJson() const {
  // Host ops under this process's pid, each thread a tid; each device a process of its own (pid: its
  // index, as Kineto writes "GPU 0"), each of its streams a tid (the default stream 7, as CUDA's
  // default stream shows in PyTorch's traces).
  const long pid = static_cast<long>(getpid());
  std::vector<std::string> events;
  auto times = [](double ts, double dur) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "\"ts\": %.3f, \"dur\": %.3f", ts, dur);
    return std::string(buf);
  };
  auto deviceIndex = [](const std::string& device) {  // "cuda:1" -> 1
    const std::size_t colon = device.find(':');
    return colon == std::string::npos ? 0L : std::strtol(device.c_str() + colon + 1, nullptr, 10);
  };
  std::map<std::pair<long, std::uintptr_t>, long> streamLanes;  // (device, stream id) -> tid
  std::map<long, bool> devices;                                 // index -> emulated
  std::set<std::uint64_t> threads;
  // Correlation ids as large as CUPTI's: HTA narrows the column to the smallest integer type that holds
  // them, then stores event indices in a column of that type (small ids made it fail on a short trace).
  std::int64_t correlation = 1 << 20;
  for (std::size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    const std::string external = std::to_string(i + 1);
    threads.insert(e.thread);
    std::string args = "\"External id\": " + external;
    if (options_.record_shapes) args += ", \"Input Dims\": \"" + jsonEscape(e.shapes) + "\"";
    if (options_.profile_memory) args += ", \"CPU Mem\": " + std::to_string(e.memoryBytes);
    events.push_back("{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"" + jsonEscape(e.name) + "\", \"pid\": " + std::to_string(pid) +
                     ", \"tid\": " + std::to_string(e.thread) + ", " + times(e.startUs, e.durationUs) + ", \"args\": {" + args + "}}");
    // The device's side: one kernel per op whose device work is its own (an op that called others
    // with device work holds theirs in its span: drawn, the spans would nest on one stream's lane).
    if (e.device.empty() || e.deviceChildren) continue;
    const long device = deviceIndex(e.device);
    if (!devices.count(device)) {
      bool emulated = false;
      try {
        emulated = cuda::isEmulatedGpu(Device::parse(e.device));
      } catch (const std::exception&) {  // a name this process cannot read back: labelled a GPU
      }
      devices[device] = emulated;
    }
    auto lane = streamLanes.find({device, e.deviceStream});
    if (lane == streamLanes.end()) {
      long tid = e.deviceStream == 0 ? 7 : 20 + static_cast<long>(streamLanes.size());
      lane = streamLanes.emplace(std::pair{device, e.deviceStream}, tid).first;
    }
    const std::string corr = std::to_string(++correlation), ids = "\"External id\": " + external + ", \"correlation\": " + corr;
    const std::string hostPlace = "\"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(e.thread);
    const std::string devicePlace = "\"pid\": " + std::to_string(device) + ", \"tid\": " + std::to_string(lane->second);
    events.push_back("{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", " + hostPlace + ", " +
                     times(e.startUs, std::min(e.durationUs, 1.0)) + ", \"args\": {" + ids + "}}");
    events.push_back("{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"" + jsonEscape(e.name) + "\", " + devicePlace + ", " +
                     times(e.deviceStartUs, e.deviceUs) + ", \"args\": {" + ids + ", \"device\": " + std::to_string(device) +
                     ", \"stream\": " + std::to_string(lane->second) + "}}");
    char at[64];
    std::snprintf(at, sizeof at, "%.3f", e.startUs);
    events.push_back("{\"ph\": \"s\", \"id\": " + corr + ", " + hostPlace + ", \"ts\": " + at + ", \"cat\": \"ac2g\", \"name\": \"ac2g\"}");
    std::snprintf(at, sizeof at, "%.3f", e.deviceStartUs);
    events.push_back("{\"ph\": \"f\", \"id\": " + corr + ", " + devicePlace + ", \"ts\": " + at +
                     ", \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}");
  }
  // The steps (step()), on the thread that marked them -- the first that recorded -- as PyTorch's.
  const std::uint64_t stepThread = threads.empty() ? 1 : *threads.begin();
  const double endUs = stopped_ ? stopUs_ - startUs_ : nowUs() - startUs_;
  for (std::size_t k = 0; k < stepEndsUs_.size() || (k == stepEndsUs_.size() && !stepEndsUs_.empty()); ++k) {
    const double from = k == 0 ? 0.0 : stepEndsUs_[k - 1], to = k < stepEndsUs_.size() ? stepEndsUs_[k] : endUs;
    const bool busy = std::any_of(events_.begin(), events_.end(), [&](const Event& e) { return e.startUs >= from && e.startUs < to; });
    if (k == stepEndsUs_.size() && !busy) break;  // after the last step() nothing ran
    events.push_back("{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#" + std::to_string(k + 1) + "\", \"pid\": " +
                     std::to_string(pid) + ", \"tid\": " + std::to_string(stepThread) + ", " + times(from, to - from) + ", \"args\": {}}");
    if (k == stepEndsUs_.size()) break;
  }
  // Names: the process and its threads, each device and its streams.
  auto meta = [&](const std::string& what, long p, std::optional<long> tid, const std::string& key, const std::string& value) {
    events.push_back("{\"ph\": \"M\", \"name\": \"" + what + "\", \"pid\": " + std::to_string(p) + (tid ? ", \"tid\": " + std::to_string(*tid) : "") +
                     ", \"args\": {\"" + key + "\": \"" + jsonEscape(value) + "\"}}");
  };
  meta("process_name", pid, std::nullopt, "name", "gpulab (pid " + std::to_string(pid) + ")");
  for (const std::uint64_t t : threads) meta("thread_name", pid, static_cast<long>(t), "name", "thread " + std::to_string(t) + (t == stepThread ? " (main)" : ""));
  for (const auto& [device, emulated] : devices) {
    meta("process_name", device, std::nullopt, "name", "GPU " + std::to_string(device));
    meta("process_labels", device, std::nullopt, "labels", emulated ? "emulated GPU: runs on your CPU" : "GPU");
  }
  for (const auto& [where, tid] : streamLanes) meta("thread_name", where.first, tid, "name", "stream " + std::to_string(tid));

  std::string out = "{\"schemaVersion\": 1, \"distributedInfo\": {\"backend\": \"none\", \"rank\": 0, \"world_size\": 1},\n"
                    " \"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (std::size_t i = 0; i < events.size(); ++i) out += (i ? ",\n  " : "  ") + events[i];
  out += "\n]}\n";
  return out;
}

void Profile::export_chrome_trace(const std::string& path) const { writeFileAtomically(path, chromeTraceJson(), "the Chrome trace"); }

}  // namespace gpulab::profiler
