#pragma once
// Every error the engine raises is an exception whose text a PyTorch user recognises. The engine
// never exits or aborts: after any of these, the caller can carry on and the next run works.
#include <stdexcept>
#include <string>

namespace gpulab {

// PyTorch's RuntimeError.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// PyTorch's ValueError / TypeError family: a bad argument value (shape, range, name).
class ValueError : public Error {
 public:
  using Error::Error;
};

// PyTorch's IndexError: a dimension or index out of range.
class IndexError : public Error {
 public:
  using Error::Error;
};

// A feature that exists in PyTorch but not (yet) here, e.g. an op for a dtype.
class NotImplementedError : public Error {
 public:
  using Error::Error;
};

// "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
class DeviceMismatchError : public Error {
 public:
  using Error::Error;
};

// "CUDA out of memory. Tried to allocate ..." (and the CPU's emulated budget).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A failing CUDA runtime, cuBLAS or cuDNN call: the call, file, line and the library's message.
class CudaError : public Error {
 public:
  using Error::Error;
};

// The file or data set a caller named is missing or malformed.
class IOError : public Error {
 public:
  using Error::Error;
};

}  // namespace gpulab
