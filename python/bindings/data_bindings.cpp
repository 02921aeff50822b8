// The engine's DataLoader over a TensorDataset of (inputs, targets): what torch.utils.data.DataLoader
// uses for such a dataset (gpulab/utils/data.py). Batches are gathered by the engine -- on its worker
// threads with num_workers > 0, into pinned buffers with pin_memory -- without the GIL; Python only
// receives each finished batch.
#include <pybind11/stl.h>

#include <memory>
#include <mutex>

#include "engine/data/dataloader.h"
#include "engine/data/dataset.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

namespace {

// One epoch of the engine's DataLoader, as Python iterates it. Threads may share one, and each batch
// goes to exactly one of the threads that call next() on it (as PyTorch's single-process iterator does
// as a rule; tests/python/dataloader_threads.py):
// `mutex` makes advancing it and taking the batch one step, taken without the GIL -- the advance may
// wait for a worker -- and in that order, so that no thread waits for the GIL while holding it.
// Without it two threads advanced the same C++ iterator at once: batches were lost and repeated, and
// the heap corrupted (issue 48, 3.1).
struct EpochIterator {
  std::shared_ptr<data::DataLoader> loader;
  data::DataLoader::Iterator it;
  bool started = false;
  std::unique_ptr<std::mutex> mutex = std::make_unique<std::mutex>();  // on the heap: pybind11 moves the iterator
};

}  // namespace

void bindData(py::module_& m) {
  // Fashion-MNIST from Debian's dataset-fashion-mnist (engine/data/dataset.h): (images, labels), the
  // images (N, 1, 28, 28) normalised, for lab.fashion_mnist() -- torchvision's data set, as tensors.
  m.def("_fashion_mnist", [](bool train) {
    std::shared_ptr<data::TensorDataset> ds;
    {
      py::gil_scoped_release release;
      ds = data::loadFashionMnist(train);
    }
    return py::make_tuple(ds->inputs(), ds->targets());
  }, py::arg("train") = true);
  py::class_<EpochIterator>(m, "_TensorLoaderIterator")
      .def("__iter__", [](EpochIterator& self) -> EpochIterator& { return self; }, py::return_value_policy::reference_internal)
      .def("__next__", [](EpochIterator& self) {
        data::Batch batch;
        bool done = false;
        {
          py::gil_scoped_release release;  // a worker may still be gathering the batch
          std::lock_guard lock(*self.mutex);
          if (self.started) ++self.it;
          self.started = true;
          done = self.it == self.loader->end();
          if (!done) batch = *self.it;  // this thread's batch: the next thread's advance replaces *it
        }
        if (done) throw py::stop_iteration();
        return py::make_tuple(std::move(batch.inputs), std::move(batch.targets));
      });
  py::class_<data::DataLoader, std::shared_ptr<data::DataLoader>>(m, "_TensorLoader")
      .def(py::init([](const Tensor& inputs, const Tensor& targets, std::int64_t batchSize, bool shuffle, bool dropLast, int workers,
                       bool pinMemory, std::uint64_t seed) {
             auto dataset = std::make_shared<data::TensorDataset>(inputs, targets);
             return std::make_shared<data::DataLoader>(
                 dataset, data::DataLoaderOptions{.batch_size = batchSize, .shuffle = shuffle, .drop_last = dropLast,
                                                  .num_workers = workers, .pin_memory = pinMemory, .seed = seed});
           }),
           py::arg("inputs"), py::arg("targets"), py::arg("batch_size"), py::arg("shuffle"), py::arg("drop_last"), py::arg("num_workers"),
           py::arg("pin_memory"), py::arg("seed"))
      .def("__len__", &data::DataLoader::size)
      .def_property_readonly("pins_memory", &data::DataLoader::pinsMemory)
      .def("__iter__", [](std::shared_ptr<data::DataLoader> self) {
        EpochIterator e;
        {
          py::gil_scoped_release release;
          e.it = self->begin();
        }
        e.loader = std::move(self);
        return e;
      });
}

}  // namespace gpulab::python
