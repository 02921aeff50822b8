// Grad mode and torch.cuda over the engine: devices (real GPUs, then the emulated GPU when this process
// has one), synchronisation and the caching allocator's memory calls.
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/lab/lab_schema.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/live_bytes.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/memory_snapshot.h"
#include "engine/runtime/blas_kernels.h"
#include "engine/core/cpu_features.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/run_record.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

namespace {

// torch.cuda's device count: the real usable GPUs, and the emulated GPU after them when it is on.
int cudaDeviceCount() { return static_cast<int>(cuda::gpuRuntimes().size()); }

// torch.cuda.*(device=None): the current CUDA device, or the one given (an int, "cuda:1", a device).
Device cudaDeviceOf(py::handle device) {
  const Device d = cudaDeviceOrCurrent(device);
  if (d.index() >= cudaDeviceCount()) throw Error("Invalid device argument : did you call init?");
  return d;
}

// PyTorch's memory_stats() keys ("allocated_bytes.all.current", ...), from the engine's record.
py::dict statsDict(const MemoryStats& s) {
  py::dict out;
  auto add = [&](const char* name, const MemoryStat& m) {
    const std::string base = std::string(name) + ".all.";
    out[py::str(base + "current")] = m.current;
    out[py::str(base + "peak")] = m.peak;
    out[py::str(base + "allocated")] = m.allocated;
    out[py::str(base + "freed")] = m.freed;
  };
  add("active", s.active_blocks);
  add("active_bytes", s.allocated_bytes);
  add("allocated_bytes", s.allocated_bytes);
  add("allocation", s.active_blocks);
  add("reserved_bytes", s.reserved_bytes);
  add("segment", s.segments);
  out["num_alloc_retries"] = s.num_alloc_retries;
  out["num_ooms"] = s.num_ooms;
  return out;
}

}  // namespace

// The run's record (engine/runtime/run_record.h) as plain tuples; gpulab/run_record.py gives them names.
py::dict recordDict(const run_record::Record& r) {
  py::list ops, copies, waits, streamWaits, settings, backwards, allocations;
  auto stream = [](std::uintptr_t s) { return s == run_record::kAllStreams ? py::object(py::none()) : py::object(py::int_(s)); };
  for (const auto& o : r.ops) ops.append(py::make_tuple(o.name, o.device, o.depth, o.stream, o.seq, o.shapes));
  for (const auto& c : r.copies) copies.append(py::make_tuple(c.from, c.to, c.bytes, c.stream, c.nonBlocking, c.pinned, c.seq));
  for (const auto& w : r.waits) waits.append(py::make_tuple(w.what, w.device, stream(w.stream), w.seq));
  for (const auto& w : r.streamWaits) streamWaits.append(py::make_tuple(w.device, w.waiting, w.on, w.seq));
  for (const auto& v : r.settings) settings.append(py::make_tuple(v.name, v.value, v.seq));
  for (const auto& b : r.backwards) backwards.append(py::make_tuple(b.leaves, b.gradNone, b.gradZero, b.gradNonzero, b.gradUnknown));
  for (const auto& a : r.allocations) allocations.append(py::make_tuple(a.device, a.bytes, a.allocatedAfter, a.reservedAfter, a.cap));
  py::dict out;
  out["ops"] = ops;
  out["copies"] = copies;
  out["waits"] = waits;
  out["stream_waits"] = streamWaits;
  out["settings"] = settings;
  out["backwards"] = backwards;
  out["allocations"] = allocations;
  out["dropped"] = r.dropped;
  return out;
}

void bindRuntime(py::module_& m) {
  py::class_<run_record::RunRecording>(m, "_RunRecording")
      .def(py::init<>())
      .def("stop", [](run_record::RunRecording& r) { return recordDict(r.stop()); });
  m.def("is_grad_enabled", &isGradEnabled);
  m.def("_set_grad_enabled", &setGradEnabled);

  // OpenBLAS's kernels (engine/runtime/blas_kernels.h): the core to ask for when OpenBLAS took a
  // generic one on this CPU ("" when its choice stands). gpulab's __main__ runs itself again with it.
  m.def("_better_blas_core", []() { return betterBlasCore(blasCoreName(), cpuFeatures()); });
  m.def("_blas_kernels", &blasKernelsSummary);

  // The lab protocol's fields (engine/lab/lab_schema.h), which the notebook kernel's lab.view(...),
  // lab.point(...), ... check a call against before sending it: {"updates": {event: {"what": "a
  // point", "fields": [{"name", "type", "required", "choices"}, ...]}}, "objects": {"axis": ...,
  // "series": ...}}.
  m.def("_lab_protocol", []() {
    auto table = [](const std::vector<lab::schema::UpdateDescription>& descriptions) {
      py::dict out;
      for (const lab::schema::UpdateDescription& u : descriptions) {
        py::list fields;
        for (const lab::schema::FieldDescription& f : u.fields) {
          py::dict d;
          d["name"] = f.name;
          d["type"] = lab::schema::typeName(f.type);
          d["required"] = f.presence == lab::schema::Presence::Required;
          d["choices"] = f.choices;
          fields.append(d);
        }
        py::dict entry;
        entry["what"] = u.what;
        entry["fields"] = fields;
        out[py::str(u.event)] = entry;
      }
      return out;
    };
    py::dict out;
    out["updates"] = table(lab::schema::describe());
    out["objects"] = table(lab::schema::describeObjects());
    return out;
  });

  // torch.cuda.
  m.def("_cuda_compiled", &cuda::compiledWithCuda);
  m.def("_cuda_device_count", &cudaDeviceCount);
  m.def("_cuda_real_device_count", &cuda::deviceCount);
  m.def("_cuda_unavailable_reason", []() { return cuda::availability().reason; });
  m.def("_emulated_gpu_index", []() -> py::object {
    const std::optional<Device> d = cuda::emulatedDevice();
    return d ? py::object(py::int_(d->index())) : py::none();
  });
  m.def("_emulated_gpu_phrase", []() { return std::string(cuda::kEmulatedGpuPhrase); });
  m.def("_device_label", [](py::object device) { return cuda::deviceLabel(deviceFrom(device)); });
  m.def("_cuda_device_properties", [](py::object device) {
    const Device d = cudaDeviceOf(device);
    py::dict out;
    const cuda::DeviceRuntime& runtime = cuda::runtimeFor(d);
    if (!runtime.isRealGpu()) {
      out["name"] = std::string("GPU Lab emulated GPU (") + cuda::kEmulatedGpuPhrase + ")";
      out["total_memory"] = runtime.totalMemory();
      out["major"] = 0;
      out["minor"] = 0;
      out["multi_processor_count"] = 0;
      out["emulated"] = true;
      return out;
    }
    // availability() returns its report by value: keep it, not a reference into the temporary (that
    // dangled, and get_device_name() crashed the interpreter on a real GPU).
    const cuda::Availability available = cuda::availability();
    const cuda::DeviceProperties& p = available.devices.at(static_cast<std::size_t>(d.index()));
    out["name"] = p.name;
    out["total_memory"] = static_cast<std::int64_t>(p.total_memory);
    out["major"] = p.major;
    out["minor"] = p.minor;
    out["multi_processor_count"] = p.multiprocessor_count;
    out["emulated"] = false;
    return out;
  }, py::arg("device") = py::none());
  m.def("_cuda_current_device", []() { return executionContext().currentCudaDevice; });
  m.def("_cuda_set_device", [](py::object device) {
    const Device d = cudaDeviceOf(device);
    executionContext().currentCudaDevice = d.index();
  });
  m.def("_cuda_synchronize", [](py::object device) {
    const Device d = cudaDeviceOf(device);
    py::gil_scoped_release release;
    cuda::synchronize(d.index());
  }, py::arg("device") = py::none());

  // The caching allocator's numbers, per device (torch.cuda.memory_allocated(device=None), ...).
  m.def("_memory_allocated", [](py::object d) { return memory_allocated(cudaDeviceOf(d)); }, py::arg("device") = py::none());
  m.def("_max_memory_allocated", [](py::object d) { return max_memory_allocated(cudaDeviceOf(d)); }, py::arg("device") = py::none());
  m.def("_memory_reserved", [](py::object d) { return memory_reserved(cudaDeviceOf(d)); }, py::arg("device") = py::none());
  m.def("_max_memory_reserved", [](py::object d) { return max_memory_reserved(cudaDeviceOf(d)); }, py::arg("device") = py::none());
  m.def("_reset_peak_memory_stats", [](py::object d) { reset_peak_memory_stats(cudaDeviceOf(d)); }, py::arg("device") = py::none());
  m.def("_memory_stats", [](py::object d) { return statsDict(memory_stats(cudaDeviceOf(d))); }, py::arg("device") = py::none());
  // The same numbers for any device, the CPU too (GPU Lab's host allocator keeps them; PyTorch has no
  // CPU memory calls), with the device's free memory and capacity: for lab.memory_stats and
  // lab.reset_peak_memory_stats.
  m.def("_memory_stats_of", [](py::object d) {
    const Device device = deviceFrom(d);
    py::dict out = statsDict(memory_stats(device));
    const auto [free, total] = mem_get_info(device);
    out["free_bytes"] = free;
    out["total_bytes"] = total;
    return out;
  });
  // Seconds the device's runtime has spent running kernels so far: the emulated GPU's streams time
  // theirs (what nvidia-smi's GPU-Util would say); None on the CPU and where the runtime cannot say.
  m.def("_busy_seconds", [](py::object d) { return cuda::busySeconds(deviceFrom(d)); });
  // What cuDNN chose on a device (cuda::cudnnChoices): for every convolution pass and shape met since
  // the last clear, its candidates, their times when benchmark mode ran them and the one that ran.
  // Empty on the CPU and the emulated GPU, which have no cuDNN. PyTorch keeps this inside cuDNN's
  // cache with no call to read it; lab.cudnn_choices is GPU Lab's.
  m.def("_cudnn_choices", [](py::object d) {
    const Device device = deviceFrom(d);
    py::list out;
    if (!device.isCuda()) return out;
    for (const cuda::ConvAlgorithmChoice& c : cuda::cudnnChoices(device.index())) {
      py::list trials;
      for (const cuda::ConvAlgorithmTrial& t : c.trials) {
        py::dict trial;
        trial["algorithm"] = t.algorithm;
        trial["milliseconds"] = t.milliseconds >= 0 ? py::object(py::float_(t.milliseconds)) : py::object(py::none());
        trial["workspace"] = t.workspace;
        trial["deterministic"] = t.deterministic;
        trial["chosen"] = t.chosen;
        trial["status"] = t.status;
        trials.append(trial);
      }
      py::dict choice;
      choice["pass"] = c.pass;
      choice["shape"] = c.shape;
      choice["how"] = c.how;
      choice["search_milliseconds"] = c.searchMilliseconds;
      choice["trials"] = trials;
      out.append(choice);
    }
    return out;
  });
  m.def("_clear_cudnn_choices", [](py::object d) {
    const Device device = deviceFrom(d);
    if (device.isCuda()) cuda::clearCudnnChoices(device.index());
  });
  m.def("_reset_peak_memory_stats_of", [](py::object d) { reset_peak_memory_stats(deviceFrom(d)); });
  m.def("_memory_summary", [](py::object d) { return memory_summary(cudaDeviceOf(d)); }, py::arg("device") = py::none());
  m.def("_empty_cache", []() {
    const int n = cudaDeviceCount();
    for (int i = 0; i < n; ++i) empty_cache(Device(DeviceType::CUDA, i));
  });
  m.def("_set_per_process_memory_fraction", [](double fraction, py::object d) {
    if (fraction < 0 || fraction > 1) throw py::value_error("Invalid fraction value: " + std::to_string(fraction) + ". Allowed range: 0~1");
    set_per_process_memory_fraction(fraction, cudaDeviceOf(d));
  }, py::arg("fraction"), py::arg("device") = py::none());
  // torch.cuda.memory._record_memory_history / _snapshot / _dump_snapshot: the engine's history of every
  // allocator's events, in the format of PyTorch's snapshots (pytorch.org/memory_viz opens it).
  py::class_<MemoryHistory>(m, "_MemoryHistory")
      .def(py::init<std::size_t>(), py::arg("max_entries"))
      .def("set_max_entries", &MemoryHistory::setMaxEntries, py::arg("max_entries"))
      .def("snapshot_pickle", [](const MemoryHistory& h) {
        std::string bytes;
        {
          py::gil_scoped_release release;
          bytes = h.snapshotPickle();
        }
        return py::bytes(bytes);
      })
      .def("write_snapshot", &MemoryHistory::writeSnapshot, NoGil());
  // The lessons' code cells draw memory by category (python/gpulab/kernel.py): the live bytes of each
  // category on one device, followed from the allocator's events since the object was made.
  py::class_<LiveBytesByCategory>(m, "_LiveBytesByCategory")
      .def(py::init([](py::object d) {
             // An index or None: a CUDA device (torch.cuda's way); a device or its name: any, the CPU too.
             const bool cudaIndex = d.is_none() || py::isinstance<py::int_>(d);
             return std::make_unique<LiveBytesByCategory>(cudaIndex ? cudaDeviceOf(d) : deviceFrom(d));
           }), py::arg("device") = py::none())
      .def("update", [](LiveBytesByCategory& live) {
        const LiveBytesByCategory::Bytes bytes = live.update();
        py::dict out;
        for (int c = 0; c < kMemoryCategoryCount; ++c) out[memoryCategoryName(static_cast<MemoryCategory>(c))] = bytes[static_cast<std::size_t>(c)];
        return out;
      });
  // What the allocations of this thread are for while the scope lives (nn.Module tags a forward's
  // activations, .to() a model's parameters); with untagged_only, only where nothing tagged them yet
  // (a module inside a checkpointed segment keeps its tag). Thread-local, as the engine's scopes are.
  struct CategoryScope {
    MemoryCategory category;
    bool untaggedOnly;
    std::optional<MemoryCategoryScope> scope;
  };
  py::class_<CategoryScope>(m, "_MemoryCategoryScope")
      .def(py::init([](const std::string& name, bool untaggedOnly) {
             for (int c = 0; c < kMemoryCategoryCount; ++c) {
               if (name == memoryCategoryName(static_cast<MemoryCategory>(c))) {
                 return std::unique_ptr<CategoryScope>(new CategoryScope{static_cast<MemoryCategory>(c), untaggedOnly, std::nullopt});
               }
             }
             throw py::value_error("unknown memory category '" + name + "'");
           }),
           py::arg("name"), py::arg("untagged_only") = false)
      .def("__enter__", [](CategoryScope& s) {
        if (!s.untaggedOnly || MemoryCategoryScope::current() == MemoryCategory::Other) s.scope.emplace(s.category);
      })
      .def("__exit__", [](CategoryScope& s, py::args) { s.scope.reset(); });
  // Whether anyone follows the allocator's events now: tagging costs nothing to skip otherwise.
  m.def("_memory_events_wanted", &memoryEventsWanted);
  m.def("_mem_get_info", [](py::object d) { return mem_get_info(cudaDeviceOf(d)); }, py::arg("device") = py::none());
  // What nvidia-smi shows (NVML): torch.cuda.utilization, temperature, power_draw, list_gpu_processes.
  // Without NVML -- the emulated GPU, a driver without it -- RuntimeError with the reason, where
  // PyTorch raises for a missing pynvml.
  m.def("_device_telemetry", [](py::object d) {
    const DeviceTelemetry t = device_telemetry(cudaDeviceOf(d));
    if (!t.available) throw std::runtime_error("no NVML reading (what nvidia-smi shows): " + t.reason);
    auto optional = [](const auto& v) { return v ? py::cast(*v) : py::none(); };
    py::list processes;  // (pid, bytes), as list_gpu_processes prints them
    for (const DeviceTelemetry::Process& p : t.processes) processes.append(py::make_tuple(p.pid, p.used_bytes));
    py::dict out;
    out["gpu_utilization"] = optional(t.gpu_utilization);
    out["temperature_c"] = optional(t.temperature_c);
    out["power_w"] = optional(t.power_w);
    out["processes"] = processes;
    out["processes_reason"] = t.processes_reason;
    return out;
  }, py::arg("device") = py::none());
}

}  // namespace gpulab::python
