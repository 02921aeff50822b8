#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// What devices this machine has, which one a lesson uses and why, and a measured reason to care:
// the same matrix product timed on the CPU and, where one is usable, on the GPU.
class DevicesLab final : public lab::Lab {
 public:
  std::string id() const override { return "devices"; }
  std::string title() const override { return "Devices and CPU fallback"; }
  std::string sourcePath() const override { return "labs/devices_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

// The same-device rule, shown with the engine's real error: a CPU tensor plus a GPU tensor, and a
// model on the GPU called with input on the CPU -- then the fix. Without a GPU the message comes
// from an emulated second device and says so.
class DeviceRuleLab final : public lab::Lab {
 public:
  std::string id() const override { return "device-rule"; }
  std::string title() const override { return "The same-device rule"; }
  std::string sourcePath() const override { return "labs/devices_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
