// The engine's optimizers, one per parameter group of a torch.optim optimizer (gpulab/optim): the
// update itself (fused, one pass over each parameter) stays in the engine, the param_groups, their
// hyperparameters and state_dict are Python's, as in PyTorch.
#include <pybind11/stl.h>

#include "engine/optim/optimizer.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

void bindOptimizers(py::module_& m) {
  py::class_<optim::Optimizer>(m, "_Optimizer")
      .def("step", &optim::Optimizer::step, NoGil())
      .def("zero_grad", &optim::Optimizer::zero_grad, py::arg("set_to_none") = true, NoGil())
      .def("set_lr", &optim::Optimizer::setLearningRate)
      .def_property_readonly("lr", &optim::Optimizer::learningRate)
      // One parameter's state as [(name, tensor or None)], in PyTorch's order; set_state takes the same.
      .def("state", [](const optim::Optimizer& o, std::size_t index) {
        py::list out;
        for (const auto& [name, value] : o.state(index)) out.append(py::make_tuple(name, value.defined() ? py::cast(value) : py::none()));
        return out;
      })
      .def("set_state", [](optim::Optimizer& o, std::size_t index, const py::list& items) {
        optim::Optimizer::ParamState state;
        for (py::handle item : items) {
          const py::tuple pair = item.cast<py::tuple>();
          const py::object value = pair[1];
          state.emplace_back(pair[0].cast<std::string>(), value.is_none() ? Tensor() : value.cast<Tensor>());
        }
        py::gil_scoped_release release;
        o.setState(index, state);
      });
  m.def("_sgd", [](std::vector<Tensor> params, double lr, double momentum, double dampening, double weightDecay, bool nesterov) {
    return std::unique_ptr<optim::Optimizer>(std::make_unique<optim::SGD>(
        std::move(params), optim::SGDOptions{.lr = lr, .momentum = momentum, .dampening = dampening, .weight_decay = weightDecay, .nesterov = nesterov}));
  });
  m.def("_adam", [](std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weightDecay, bool amsgrad,
                    bool capturable, bool decoupled) {
    const optim::AdamOptions o{.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weightDecay, .amsgrad = amsgrad,
                               .capturable = capturable};
    if (decoupled) return std::unique_ptr<optim::Optimizer>(std::make_unique<optim::AdamW>(std::move(params), o));
    return std::unique_ptr<optim::Optimizer>(std::make_unique<optim::Adam>(std::move(params), o));
  });
}

}  // namespace gpulab::python
