#pragma once
// GPU Lab's version, the VERSION of CMake's project() (torch.__version__'s counterpart).

namespace gpulab {

const char* version();  // "0.1.0"

}  // namespace gpulab
