#include "lessons/labs/labs.h"

#include "engine/core/errors.h"
#include "lessons/labs/devices_lab.h"
#include "lessons/labs/memory_lab.h"
#include "lessons/labs/train_lab.h"

namespace gpulab::labs {

std::vector<std::unique_ptr<lab::Lab>> makeBuiltinLabs() {
  std::vector<std::unique_ptr<lab::Lab>> all;
  all.push_back(std::make_unique<DevicesLab>());
  all.push_back(std::make_unique<DeviceRuleLab>());
  all.push_back(std::make_unique<TrainLab>());
  all.push_back(std::make_unique<MemoryLab>());
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
