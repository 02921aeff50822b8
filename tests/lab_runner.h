#pragma once
// Runs a built-in lab with some parameters set, as the GUI and the CLI do.
#include <map>
#include <string>

#include "lessons/labs/labs.h"

namespace gpulab::test {

inline void runLab(const std::string& id, const std::map<std::string, std::string>& settings, lab::MetricSink& sink,
                   const lab::StopToken* stop = nullptr) {
  auto theLab = labs::makeLab(id);
  lab::Params params = theLab->defaults();
  for (const auto& [name, value] : settings) params.set(name, value);
  lab::StopToken neverStops;
  theLab->run(params, sink, stop ? *stop : neverStops);
}

}  // namespace gpulab::test
