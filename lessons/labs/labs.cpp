#include "lessons/labs/labs.h"

#include "engine/core/errors.h"
// GPULAB_BUILTIN_LABS(X): X(Class) for each lab of the course's one list (lessons/CMakeLists.txt).
#include "lessons/labs/lab_registry.inc"

namespace gpulab::labs {

std::vector<std::unique_ptr<lab::Lab>> makeBuiltinLabs() {
  std::vector<std::unique_ptr<lab::Lab>> all;
#define GPULAB_ADD_LAB(Class) all.push_back(std::make_unique<Class>());
  GPULAB_BUILTIN_LABS(GPULAB_ADD_LAB)
#undef GPULAB_ADD_LAB
  return all;
}

std::unique_ptr<lab::Lab> makeLab(const std::string& id) {
  std::string known;
  for (auto& l : makeBuiltinLabs()) {
    if (l->id() == id) return std::move(l);
    known += (known.empty() ? "" : ", ") + l->id();
  }
  throw ValueError("unknown lab '" + id + "' (known labs: " + known + ")");
}

}  // namespace gpulab::labs
