#include "engine/core/version.h"

#ifndef GPULAB_VERSION_STRING
#error "GPULAB_VERSION_STRING is set by engine/CMakeLists.txt from project(VERSION)"
#endif

namespace gpulab {

const char* version() { return GPULAB_VERSION_STRING; }

}  // namespace gpulab
