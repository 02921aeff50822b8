// Mixed precision and the profiler: torch.autocast (the engine's AutocastGuard, entered and left by a
// Python context manager), GradScaler (the engine's, over one engine optimizer), torch.profiler.profile
// (the engine's Profile) and the backends' switches (cuDNN benchmark/deterministic, TF32).
#include <pybind11/stl.h>

#include <memory>

#include "engine/ops/autocast.h"
#include "engine/amp/grad_scaler.h"
#include "engine/optim/optimizer.h"
#include "engine/profiler/profiler.h"
#include "engine/runtime/cuda_runtime.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

namespace {

DeviceType deviceTypeOf(const std::string& type) {
  if (type == "cuda") return DeviceType::CUDA;
  if (type == "cpu") return DeviceType::CPU;
  throw py::value_error("User specified an unsupported autocast device_type '" + type + "'");
}

// One `with torch.autocast(...)` region: the engine's guard lives from __enter__ to __exit__.
class AutocastRegion {
 public:
  AutocastRegion(const std::string& deviceType, std::optional<DType> dtype, bool enabled)
      : type_(deviceTypeOf(deviceType)), dtype_(dtype.value_or(amp::AutocastGuard::defaultDtype(type_))), enabled_(enabled) {}
  void enter() { guard_ = std::make_unique<amp::AutocastGuard>(type_, dtype_, enabled_); }
  void exit() { guard_.reset(); }

 private:
  DeviceType type_;
  DType dtype_;
  bool enabled_;
  std::unique_ptr<amp::AutocastGuard> guard_;
};

}  // namespace

void bindAmpAndProfiler(py::module_& m) {
  py::class_<AutocastRegion>(m, "_AutocastRegion")
      .def(py::init<std::string, std::optional<DType>, bool>(), py::arg("device_type"), py::arg("dtype"), py::arg("enabled"))
      .def("enter", &AutocastRegion::enter)
      .def("exit", &AutocastRegion::exit);
  m.def("is_autocast_enabled", [](const std::string& type) { return amp::is_autocast_enabled(deviceTypeOf(type)); },
        py::arg("device_type") = "cuda");
  m.def("get_autocast_dtype", [](const std::string& type) { return dtypeObject(amp::get_autocast_dtype(deviceTypeOf(type))); },
        py::arg("device_type") = "cuda");

  py::class_<amp::GradScaler>(m, "_GradScaler")
      .def(py::init([](double initScale, double growthFactor, double backoffFactor, std::int64_t growthInterval, bool enabled) {
             return std::make_unique<amp::GradScaler>(amp::GradScalerOptions{.init_scale = initScale, .growth_factor = growthFactor,
                                                                             .backoff_factor = backoffFactor,
                                                                             .growth_interval = growthInterval, .enabled = enabled});
           }),
           py::arg("init_scale"), py::arg("growth_factor"), py::arg("backoff_factor"), py::arg("growth_interval"), py::arg("enabled"))
      .def("scale", &amp::GradScaler::scale, NoGil())
      // An optimizer's engine optimizers, one per parameter group (gpulab/optim), as one optimizer.
      .def("unscale_", [](amp::GradScaler& s, const std::vector<optim::Optimizer*>& groups) { s.unscale_(groups); }, NoGil())
      .def("step", [](amp::GradScaler& s, const std::vector<optim::Optimizer*>& groups) { return s.step(groups); }, NoGil())
      .def("update", [](amp::GradScaler& s, std::optional<double> newScale) {
        if (newScale) s.update(*newScale);
        else s.update();
      }, py::arg("new_scale") = py::none(), NoGil())
      .def("get_scale", &amp::GradScaler::get_scale)
      .def("is_enabled", &amp::GradScaler::is_enabled)
      .def("get_growth_tracker", &amp::GradScaler::growth_tracker)
      .def_property_readonly("last_step_skipped", [](const amp::GradScaler& s) { return s.last_step().skipped; });

  // key_averages()'s rows, as PyTorch's EventList of FunctionEventAvg: times in microseconds.
  py::class_<profiler::OpAverage>(m, "_FunctionEventAvg")
      .def_property_readonly("key", [](const profiler::OpAverage& a) { return a.name; })
      .def_readonly("count", &profiler::OpAverage::count)
      .def_readonly("cpu_time_total", &profiler::OpAverage::cpuTimeTotalUs)
      .def_readonly("self_cpu_time_total", &profiler::OpAverage::selfCpuTimeTotalUs)
      .def_readonly("device_time_total", &profiler::OpAverage::deviceTimeTotalUs)
      .def_readonly("self_device_time_total", &profiler::OpAverage::selfDeviceTimeTotalUs)
      .def_property_readonly("cpu_time", &profiler::OpAverage::cpuTimeAvgUs)
      .def_property_readonly("device_time", &profiler::OpAverage::deviceTimeAvgUs)
      .def_readonly("cpu_memory_usage", &profiler::OpAverage::cpuMemoryBytes)
      .def_readonly("self_cpu_memory_usage", &profiler::OpAverage::selfCpuMemoryBytes)
      .def_property_readonly("input_shapes", [](const profiler::OpAverage& a) { return a.shapes; })
      .def("__repr__", [](const profiler::OpAverage& a) {
        return "<FunctionEventAvg key=" + a.name + " self_cpu_time=" + std::to_string(a.selfCpuTimeTotalUs) + "us cpu_time=" +
               std::to_string(a.cpuTimeTotalUs) + "us count=" + std::to_string(a.count) + ">";
      });
  py::class_<profiler::KeyAverages>(m, "_KeyAverages")
      .def("table", &profiler::KeyAverages::table, py::arg("sort_by") = "cpu_time_total", py::arg("row_limit") = 100)
      .def("__str__", [](const profiler::KeyAverages& k) { return k.table(); })
      .def("__len__", [](const profiler::KeyAverages& k) { return k.rows.size(); })
      .def("__getitem__", [](const profiler::KeyAverages& k, std::int64_t i) {
        const auto n = static_cast<std::int64_t>(k.rows.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw py::index_error("list index out of range");
        return k.rows[static_cast<std::size_t>(i)];
      })
      .def("__iter__", [](const profiler::KeyAverages& k) { return py::make_iterator(k.rows.begin(), k.rows.end()); },
           py::keep_alive<0, 1>());
  py::class_<profiler::Profile>(m, "_Profile")
      .def(py::init([](bool recordShapes, bool profileMemory, bool recordDevice) {
             return std::make_unique<profiler::Profile>(
                 profiler::ProfileOptions{.record_shapes = recordShapes, .profile_memory = profileMemory, .record_device = recordDevice});
           }),
           py::arg("record_shapes"), py::arg("profile_memory"), py::arg("record_device"))
      .def("stop", &profiler::Profile::stop, NoGil())
      .def("step", &profiler::Profile::step)
      .def("key_averages", &profiler::Profile::key_averages, py::arg("group_by_input_shape") = false)
      .def("export_chrome_trace", &profiler::Profile::export_chrome_trace, NoGil());

  m.def("_set_cudnn_benchmark", &cuda::setCudnnBenchmark);
  m.def("_cudnn_benchmark", &cuda::cudnnBenchmark);
  m.def("_set_cudnn_deterministic", &cuda::setCudnnDeterministic);
  m.def("_cudnn_deterministic", &cuda::cudnnDeterministic);
  m.def("_set_deterministic_algorithms", &cuda::setDeterministicAlgorithms);
  m.def("_deterministic_algorithms", &cuda::deterministicAlgorithms);
  m.def("_set_cudnn_allow_tf32", &cuda::setCudnnAllowTf32);
  m.def("_cudnn_allow_tf32", &cuda::cudnnAllowTf32);
  m.def("_set_matmul_allow_tf32", &cuda::setAllowTf32);
  m.def("_matmul_allow_tf32", &cuda::allowTf32);
}

}  // namespace gpulab::python
