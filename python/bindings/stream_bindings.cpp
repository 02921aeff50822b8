// torch.cuda.Stream, Event, current_stream / default_stream, `with torch.cuda.stream(s):` and
// Tensor.record_stream: the engine's streams (engine/runtime/stream.h), on a real GPU or the emulated one.
#include <pybind11/stl.h>

#include <memory>

#include "engine/distributed/distributed.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/stream.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

namespace {

// One `with torch.cuda.stream(s):` block: the engine's guard lives from __enter__ to __exit__.
class StreamContext {
 public:
  explicit StreamContext(std::optional<cuda::Stream> stream) : stream_(stream) {}
  void enter() {
    if (stream_) guard_ = std::make_unique<cuda::StreamGuard>(*stream_);
  }
  void exit() { guard_.reset(); }

 private:
  std::optional<cuda::Stream> stream_;
  std::unique_ptr<cuda::StreamGuard> guard_;
};

// One `with torch.cuda.graph(g):` block: the engine's GraphCapture lives from __enter__ to __exit__.
class GraphContext {
 public:
  GraphContext(cuda::CUDAGraph& graph, std::optional<cuda::MempoolId> pool, std::optional<cuda::Stream> stream)
      : graph_(graph), pool_(pool), stream_(stream) {}
  void enter() {
    py::gil_scoped_release release;  // it waits for the device first
    capture_ = std::make_unique<cuda::GraphCapture>(graph_, pool_, stream_);
  }
  // Ends the capture; after an error in the block, abandons it (the block's error goes on).
  void exit(bool failed) {
    std::unique_ptr<cuda::GraphCapture> capture = std::move(capture_);
    if (capture && !failed) capture->end();
  }

 private:
  cuda::CUDAGraph& graph_;
  std::optional<cuda::MempoolId> pool_;
  std::optional<cuda::Stream> stream_;
  std::unique_ptr<cuda::GraphCapture> capture_;
};

}  // namespace

void bindStreams(py::module_& m) {
  py::class_<cuda::MempoolId>(m, "_MempoolId");
  py::class_<cuda::CUDAGraph>(m, "CUDAGraph")
      .def(py::init<>())
      .def("capture_begin", [](cuda::CUDAGraph& g, std::optional<cuda::MempoolId> pool) { g.capture_begin(pool); }, py::arg("pool") = py::none())
      .def("capture_end", &cuda::CUDAGraph::capture_end)
      .def("replay", &cuda::CUDAGraph::replay, NoGil())
      .def("reset", &cuda::CUDAGraph::reset)
      .def("pool", &cuda::CUDAGraph::pool)
      .def("num_nodes", &cuda::CUDAGraph::num_nodes);
  m.def("graph_pool_handle", &cuda::graph_pool_handle);
  m.def("is_current_stream_capturing", []() { return cuda::is_current_stream_capturing(); });
  py::class_<GraphContext>(m, "_GraphContext")
      .def(py::init<cuda::CUDAGraph&, std::optional<cuda::MempoolId>, std::optional<cuda::Stream>>(), py::keep_alive<1, 2>())
      .def("enter", &GraphContext::enter)
      .def("exit", &GraphContext::exit);

  py::class_<cuda::Event>(m, "Event")
      .def(py::init([](bool enableTiming, bool, bool) { return cuda::Event(enableTiming); }), py::arg("enable_timing") = false,
           py::arg("blocking") = false, py::arg("interprocess") = false)
      .def("record", [](cuda::Event& e, std::optional<cuda::Stream> stream) {
        if (stream) e.record(*stream);
        else e.record();
      }, py::arg("stream") = py::none())
      .def("query", &cuda::Event::query)
      .def("synchronize", &cuda::Event::synchronize, NoGil())
      .def("elapsed_time", &cuda::Event::elapsed_time, NoGil())
      .def("wait", [](const cuda::Event& e, std::optional<cuda::Stream> stream) {
        const cuda::Stream s = stream ? *stream : cuda::current_stream(e.stream() ? e.stream()->device() : Device(DeviceType::CUDA, executionContext().currentCudaDevice));
        s.wait_event(e);
      }, py::arg("stream") = py::none());
  py::class_<cuda::Stream>(m, "Stream")
      .def(py::init([](py::object device, int, py::kwargs) { return cuda::Stream::create(cudaDeviceOrCurrent(device)); }),
           py::arg("device") = py::none(), py::arg("priority") = 0)
      .def_property_readonly("device", [](const cuda::Stream& s) { return deviceObject(s.device()); })
      .def_property_readonly("cuda_stream", &cuda::Stream::id)
      .def("query", &cuda::Stream::query)
      .def("synchronize", &cuda::Stream::synchronize, NoGil())
      .def("wait_event", &cuda::Stream::wait_event)
      .def("wait_stream", &cuda::Stream::wait_stream)
      .def("record_event", [](const cuda::Stream& s, std::optional<cuda::Event> event) {
        cuda::Event e = event.value_or(cuda::Event());
        e.record(s);
        return e;
      }, py::arg("event") = py::none())
      .def("__eq__", [](const cuda::Stream& a, py::object b) { return py::isinstance<cuda::Stream>(b) && a == b.cast<cuda::Stream>(); })
      .def("__hash__", [](const cuda::Stream& s) { return std::hash<std::uintptr_t>()(s.id()) ^ static_cast<std::size_t>(s.device().index()); })
      .def("__repr__", &cuda::Stream::str);
  // torch.cuda.nccl's collectives, one process driving several GPUs (python/gpulab/cuda/nccl.py).
  m.def("_nccl_available", &distributed::ncclAvailable);
  m.def("_nccl_status", &distributed::ncclStatus);
  m.def("_nccl_all_reduce", [](const std::vector<Tensor>& tensors) { distributed::all_reduce(tensors, distributed::ReduceOp::Sum); }, NoGil());
  m.def("current_stream", [](py::object device) { return cuda::current_stream(cudaDeviceOrCurrent(device)); }, py::arg("device") = py::none());
  m.def("default_stream", [](py::object device) { return cuda::default_stream(cudaDeviceOrCurrent(device)); }, py::arg("device") = py::none());
  py::class_<StreamContext>(m, "_StreamContext")
      .def(py::init<std::optional<cuda::Stream>>())
      .def("enter", &StreamContext::enter)
      .def("exit", &StreamContext::exit);
}

}  // namespace gpulab::python
