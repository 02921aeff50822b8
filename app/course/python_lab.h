#pragma once
// A lab written in Python, in its lesson's folder, against GPU Lab's `torch`: the code panel shows the
// very code that runs, in the language the learner writes. A lesson declares it in a ```lab block
// (lessons/README.md) -- its id, title, file, parameters and measurements, which the lesson's run
// blocks and challenges are checked against when it loads, without starting Python -- and a run
// calls the file's run(**settings) in a fresh notebook kernel (app/notebook), whose lab.view(...),
// lab.point(...), ... updates and printed lines reach the MetricSink as a C++ lab's would. Stop
// interrupts it (KeyboardInterrupt), and ends its process when one long engine operation holds it;
// while the window holds it at a progress update (Pause), it waits in that lab.progress() call.
#include <QJsonObject>
#include <QString>
#include <vector>

#include "engine/lab/lab.h"

namespace gpulab::course {

struct PythonLabSpec {
  QString id, title;
  QString sourcePath;  // relative to the lessons' root: "02-same-device-rule/device_rule_lab.py"
  QString path;        // where it is read from at a run: "<root>/02-same-device-rule/device_rule_lab.py"
  // cuda:0 is GPU Lab's emulated GPU where no real one is usable (a lab about two devices or a GPU's
  // memory); false for a lab that shows the machine as it is.
  bool emulatedGpu = true;
  std::vector<lab::ParamSpec> params;
  std::vector<lab::MeasurementSpec> measurements;
};

// Parses a ```lab block of the lesson in `lessonFolder` (":/lessons/02-same-device-rule"):
//   {"id": "device-rule", "title": "The same-device rule", "code": "device_rule_lab.py", "emulated_gpu": true,
//    "params": [{"name": "fixed", "type": "bool", "default": false, "description": "..."}, ...],
//    "measurements": [{"name": "device-mismatch errors", "unit": ""}, ...]}
// A parameter's type is int or float (with min and max), bool, choice (with choices), text, or device
// (auto, cpu, cuda or cuda:N, offered as this machine's devices; with "gpu_only": true, cpu is not
// offered and auto reads as the GPU). Throws ValueError saying what is wrong.
PythonLabSpec parseLabDeclaration(const QJsonObject& o, const QString& lessonFolder);

class PythonLab final : public lab::Lab {
 public:
  explicit PythonLab(PythonLabSpec spec) : spec_(std::move(spec)) {}
  std::string id() const override { return spec_.id.toStdString(); }
  std::string title() const override { return spec_.title.toStdString(); }
  std::string sourcePath() const override { return spec_.sourcePath.toStdString(); }
  std::vector<lab::ParamSpec> params() const override { return spec_.params; }
  std::vector<lab::MeasurementSpec> measurements() const override { return spec_.measurements; }
  // Throws Error with the Python traceback when the lab raises, or when its session cannot start; a
  // measurement its declaration does not list, or an update the protocol refuses, ends the run with
  // ValueError.
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
  bool runsInThisProcess() const override { return false; }

  // The call a run makes, as Python: run(size=512, fixed=False, device="auto").
  static QString callFor(const lab::Params& params);

 private:
  PythonLabSpec spec_;
};

}  // namespace gpulab::course
