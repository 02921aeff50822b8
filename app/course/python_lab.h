#pragma once
// A lab written in Python, in its lesson's folder, against GPU Lab's `torch`: the code panel shows the
// very code that runs, in the language the learner writes. A lesson declares it in a ```lab block
// (lessons/README.md) -- its id, title, file, parameters and measurements, which the lesson's run
// blocks and challenges are checked against when it loads, without starting Python -- and a run
// calls the file's run(**settings) in a fresh notebook kernel (app/notebook), whose lab.view(...),
// lab.point(...), ... updates and printed lines reach the MetricSink (engine/lab/lab.h). Stop
// interrupts it (KeyboardInterrupt), and ends its process when one long engine operation holds it;
// while the window holds it at a progress update (Pause), it waits in that lab.progress() call.
#include <QString>
#include <utility>
#include <vector>

#include "engine/lab/lab.h"

namespace gpulab::course {

// A Python lab as a lesson's ```lab block declares it (parsed in lesson.cpp; its format is in
// lessons/README.md).
struct PythonLabSpec {
  QString id, title;
  QString sourcePath;  // relative to the lessons' root: "02-same-device-rule/device_rule_lab.py"
  QString path;        // where it is read from at a run: "<root>/02-same-device-rule/device_rule_lab.py"
  // The course's module of helpers the labs share ("<root>/lab_helpers.py"): importable as
  // `lab_helpers` in the lab's session when the course has one (kLabHelpersModule).
  QString helpersPath;
  // cuda:0 is GPU Lab's emulated GPU where no real one is usable (a lab about two devices or a GPU's
  // memory); false for a lab that shows the machine as it is.
  bool emulatedGpu = true;
  std::vector<lab::ParamSpec> params;
  std::vector<lab::MeasurementSpec> measurements;
};

// The module every lab of a course may import, a file in the lessons' folder beside the lessons'
// folders: what the labs share (formatting bytes, choosing the device, the MLP) is written once.
inline constexpr const char* kLabHelpersModule = "lab_helpers";
inline constexpr const char* kLabHelpersFile = "lab_helpers.py";

// Whether a lab's source imports the helpers' module (the code panel shows it below the lab's then).
bool importsLabHelpers(const QString& source);

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
  // Records the run's memory history in its Python session (torch.cuda.memory._record_memory_history)
  // and writes it to `path` when the run ends, failed or stopped (_dump_snapshot): what
  // `gpulab-cli --memory-snapshot` asks for. A snapshot that cannot
  // be written fails the run with IOError.
  void recordMemorySnapshot(const QString& path) { snapshotPath_ = path; }
  bool memorySnapshotWritten() const { return snapshotWritten_; }

  // The call a run makes, as Python: run(size=512, fixed=False, device="auto").
  static QString callFor(const lab::Params& params);

 private:
  PythonLabSpec spec_;
  QString snapshotPath_;
  bool snapshotWritten_ = false;
};

}  // namespace gpulab::course
