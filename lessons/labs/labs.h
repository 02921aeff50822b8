#pragma once
// The labs built into GPU Lab. Lesson files can only name these: nothing in a lesson runs code of
// its own.
#include <memory>
#include <string>
#include <vector>

#include "engine/lab/lab.h"

namespace gpulab::labs {

std::vector<std::unique_ptr<lab::Lab>> makeBuiltinLabs();
// The lab with this id; throws ValueError listing the known ids otherwise.
std::unique_ptr<lab::Lab> makeLab(const std::string& id);

}  // namespace gpulab::labs
