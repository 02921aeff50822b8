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

  py::class_<profiler::KeyAverages>(m, "_KeyAverages")
      .def("table", &profiler::KeyAverages::table, py::arg("sort_by") = "cpu_time_total", py::arg("row_limit") = 100)
      .def("__str__", [](const profiler::KeyAverages& k) { return k.table(); });
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
