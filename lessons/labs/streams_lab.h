#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// Streams: chunks of data copied to the device and computed on, all on one stream (serial) and with
// the copies on a stream of their own (overlapped), each stream's work put on a timeline from its
// events; then two races -- a result read on the host before the copy finished, and a second stream
// that reads a tensor before the first one wrote it -- and the synchronisation that fixes each.
class StreamsLab final : public lab::Lab {
 public:
  std::string id() const override { return "streams"; }
  std::string title() const override { return "Streams: overlapping copies with compute, and the race synchronize() prevents"; }
  std::string sourcePath() const override { return "labs/streams_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
