// gpulab-bench-labs: the speed claims of the lessons' labs, measured. The lessons say that DataLoader
// workers keep the device busier and the loop faster (lesson 12, the feeding lab), that tiny calls are
// overhead-bound and large products compute-bound (lesson 14, the crossover lab), that an epoch of the
// CNN costs more than the MLP's (lesson 8, the cnn lab) and that cuDNN's benchmark mode pays for its
// search in the first step (the cudnn lab). Each lab measures its claim during the lesson; the unit
// tests check the mechanism behind it (tests/test_feeding_lab.cpp, test_crossover_lab.cpp,
// test_cnn_lab.cpp), not the speed, which a shared machine does not hold. This program runs the labs
// with the settings those tests used to time and prints, for each claim, the lab's figure for the
// side the lesson says wins ("ours") against the other side ("anchor"), their ratio, the direction
// the lesson claims and whether this run showed it. Nothing here fails on a figure: it exits 0 when
// every lab ran, 1 when one threw.
//
//   gpulab-bench-labs [--only feeding,crossover,cnn,cudnn]
//
// Devices: the CPU, the emulated GPU where it is on (GPULAB_EMULATED_GPU=1 forces it beside a real GPU)
// and cuda:0 where a real GPU is usable; each claim runs where its lesson makes it. The cnn lab needs
// Fashion-MNIST (GPULAB_DATA or the data folder, as gpulab-cli train finds it).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include <QCoreApplication>

#include "app/course/course.h"

using namespace gpulab;

namespace {

// What a run sent that a claim reads: its measurements.
struct Measured final : lab::MetricSink {
  std::map<std::string, double> values;
  void send(const lab::Update& u) override {
    if (const auto* m = std::get_if<lab::Measurement>(&u)) values[m->name] = m->value;
  }
  double operator[](const std::string& name) const {
    const auto it = values.find(name);
    return it == values.end() ? NAN : it->second;
  }
};

Measured runLab(const std::string& id, const std::map<std::string, std::string>& settings) {
  static const course::Course shipped = course::loadCourse();  // the course's labs (Python, in the lessons' folders)
  std::unique_ptr<lab::Lab> theLab = shipped.makeLab(QString::fromStdString(id));
  lab::Params params = theLab->defaults();
  for (const auto& [name, value] : settings) params.set(name, value);
  std::string shown;
  for (const auto& [name, value] : settings) shown += (shown.empty() ? "" : " ") + name + "=" + value;
  std::printf("\n%s lab: %s\n", id.c_str(), shown.c_str());
  std::fflush(stdout);
  Measured sink;
  lab::StopToken stop;
  theLab->check(params);
  theLab->run(params, sink, stop);
  return sink;
}

// How the lesson says ours compares with the anchor.
struct Direction {
  std::string text;                          // "ours > 1.3x anchor"
  std::function<bool(double, double)> held;  // empty: the lesson claims no direction here
};
std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}
Direction aboveTimes(double factor) {
  return {"ours > " + number(factor) + "x anchor", [factor](double o, double a) { return o > factor * a; }};
}
Direction atLeastTimes(double factor) {
  return {"ours >= " + number(factor) + "x anchor", [factor](double o, double a) { return o >= factor * a; }};
}
Direction belowTimes(double factor) {
  return {"ours < " + number(factor) + "x anchor", [factor](double o, double a) { return o < factor * a; }};
}
Direction belowBy(double points) {
  return {"ours < anchor - " + number(points) + " points",
          [points](double o, double a) { return o < a - points; }};
}
Direction within(double low, double high) {
  return {number(low) + "x < ours/anchor < " + number(high) + "x", [low, high](double o, double a) { return o > low * a && o < high * a; }};
}
Direction noDirection(const std::string& why) { return {"no direction claimed: " + why, {}}; }

int claims = 0, held = 0;

// One line: the claim, ours and its unit, the anchor, ours / anchor, the direction and this run's verdict.
void claim(const std::string& what, double ours, double anchor, const std::string& unit, const Direction& d) {
  const bool known = std::isfinite(ours) && std::isfinite(anchor);
  std::string verdict = "-";
  if (d.held && known) {
    ++claims;
    const bool ok = d.held(ours, anchor);
    held += ok ? 1 : 0;
    verdict = ok ? "held" : "NOT held in this run";
  } else if (!known) {
    verdict = "not measured";
  }
  char ratio[32] = "-";
  if (known && anchor != 0) std::snprintf(ratio, sizeof ratio, "%.2fx", ours / anchor);
  std::printf("  %-80s %11.4g %11.4g %-8s %8s  %s: %s\n", what.c_str(), ours, anchor, unit.c_str(), ratio, d.text.c_str(), verdict.c_str());
}
void header() { std::printf("  %-80s %11s %11s %-8s %8s  %s\n", "claim", "ours", "anchor", "unit", "ratio", "direction: this run"); }

std::optional<Device> emulatedGpu() { return cuda::emulatedDevice(); }
std::optional<Device> realGpu() { return cuda::isAvailable() ? std::optional<Device>(Device(DeviceType::CUDA, 0)) : std::nullopt; }

// The feeding lab (lesson 12). tests/test_feeding_lab.cpp timed these before issue 48: 4 workers, pinned,
// a read of 2 steps, 40 steps a loader, 5 rounds (the lab's default).
void feeding() {
  std::vector<std::pair<Device, std::string>> devices = {{kCPU, "CPU"}};
  if (const auto g = emulatedGpu()) devices.emplace_back(*g, "emulated GPU");
  if (const auto g = realGpu()) devices.emplace_back(*g, "GPU");
  for (const auto& [device, name] : devices) {
    const Measured m = runLab("feeding", {{"device", device.str()}, {"num_workers", "4"}, {"pin_memory", "true"}, {"load_cost", "2"}, {"steps", "40"}});
    const bool emulated = cuda::isEmulatedGpu(device), gpu = device.isCuda();
    std::printf("  %s: a step %.3g ms with its batch on the device, each batch's read %.3g ms; the ceiling %.4g steps/s\n", name.c_str(),
                m["training step time"], m["read wait per batch"], m["steps/s with the batches already on the device"]);
    header();
    const double ceiling = m["steps/s with the batches already on the device"];
    const double zero = ceiling * m["speed, % of the ceiling, 0 workers"] / 100.0, four = ceiling * m["speed, % of the ceiling, 4 workers"] / 100.0;
    claim(name + ": device idle share, 4 workers (anchor: 0 workers)", m["device idle share, 4 workers"], m["device idle share, 0 workers"], "%",
          belowBy(15));
    // The emulated GPU's kernels run on the cores the workers decode on: a busy machine made 4 workers
    // 0.9x the speed of 0 there, while the stream stayed busier.
    claim(name + ": steps/s, 4 workers (anchor: 0 workers), medians", four, zero, "steps/s",
          emulated ? noDirection("its kernels share the workers' cores") : aboveTimes(1.3));
    claim(name + ": ... slowest run of 4 workers (anchor: fastest of 0)", m["steps/s, slowest run, 4 workers"], m["steps/s, fastest run, 0 workers"],
          "steps/s", emulated ? noDirection("as above") : aboveTimes(1.0));
    claim(name + ": steps/s, 1 worker over 0 workers", m["speed-up from 1 worker"], 1.0, "x", device.isCpu() ? aboveTimes(1.1) : noDirection("the CPU's claim"));
    // The loop loading its own batches waits out every read: at most one step per read wait.
    claim(name + ": 0 workers, steps per read wait (anchor: 1)", zero * m["read wait per batch"] / 1000.0, 1.0, "steps", belowTimes(1.02));
    if (!gpu) continue;
    claim(name + ": device idle share, 4 workers pinned (anchor: pageable)", m["device idle share, 4 workers, pinned"],
          m["device idle share, 4 workers, pageable"], "%",
          emulated ? belowTimes(1.0) : noDirection("a GPU's idle share counts a blocking copy's wait as work"));
    claim(name + ": copy time per batch, pinned (anchor: pageable)", m["copy time per batch, pinned"], m["copy time per batch, pageable"], "us",
          emulated ? noDirection("the emulated GPU's copies are host memcpys") : belowTimes(1.0));
    claim(name + ": steps/s, 4 workers pinned + non_blocking (anchor: pageable)", m["steps/s, 4 workers, pinned"], m["steps/s, 4 workers, pageable"],
          "steps/s", emulated ? noDirection("its kernels share the workers' cores") : aboveTimes(1.0));
    if (emulated) {
      claim(name + ": copy stream's copies overlapping the steps (anchor: 50%)", m["copy time overlapping the steps, copy stream"], 50.0, "%",
            aboveTimes(1.0));
      claim(name + ": steps/s, copied ahead on a copy stream (anchor: pinned)", m["steps/s, 4 workers, copy stream"], m["steps/s, 4 workers, pinned"],
            "steps/s", noDirection("the lesson shows it"));
    }
  }
  // On a real GPU the prefetcher's copies need a step that keeps the GPU busy to overlap: two 8192-wide
  // layers (the lesson's 256,128 model is launch-bound there).
  if (const auto g = realGpu()) {
    const Measured m = runLab("feeding", {{"device", g->str()}, {"num_workers", "4"}, {"pin_memory", "true"}, {"steps", "40"}, {"hidden", "8192,8192"}});
    header();
    claim("GPU, 8192,8192: copy stream's copies overlapping the steps (anchor: 50%)", m["copy time overlapping the steps, copy stream"], 50.0, "%",
          aboveTimes(1.0));
    claim("GPU, 8192,8192: steps/s, copied ahead on a copy stream (anchor: pinned)", m["steps/s, 4 workers, copy stream"],
          m["steps/s, 4 workers, pinned"], "steps/s", noDirection("the lesson shows it"));
  }
}

// The crossover lab (lesson 14), as tests/test_crossover_lab.cpp timed it before issue 48.
void crossover() {
  if (const auto g = emulatedGpu()) {
    const std::string gpu = g->str();
    const Measured s = runLab("crossover", {{"gpu", gpu}, {"workload", "matmul"}, {"max_size", "512"}, {"size", "16"}, {"budget", "0.05"}});
    header();
    for (const std::string side : {"CPU", "GPU"}) {
      const std::string name = side == "GPU" ? "emulated GPU" : side;
      claim(name + ": fixed-cost share at n = 512 (anchor: 20%)", s["fixed-cost share at the largest size, " + side], 20.0, "%", belowTimes(1.0));
      claim(name + ": arithmetic share at n = 512 (anchor: 50%)", s["arithmetic share at the largest size, " + side], 50.0, "%", aboveTimes(1.0));
    }
    claim("emulated GPU, the challenge at n = 16: arithmetic share (anchor: 50%)", s["arithmetic share of the measured time at your size, GPU"], 50.0,
          "%", belowTimes(1.0));
    const Measured big = runLab("crossover", {{"gpu", gpu}, {"workload", "matmul"}, {"max_size", "16"}, {"size", "512"}, {"budget", "0.05"}});
    header();
    claim("emulated GPU, the challenge at n = 512: arithmetic share (anchor: 50%)", big["arithmetic share of the measured time at your size, GPU"],
          50.0, "%", atLeastTimes(1.0));
    const Measured product = runLab("crossover", {{"gpu", gpu}, {"workload", "matmul"}, {"max_size", "16"}, {"size", "8"}, {"budget", "0.05"}});
    const Measured step = runLab("crossover", {{"gpu", gpu}, {"workload", "mlp"}, {"max_size", "16"}, {"size", "8"}, {"budget", "0.05"}});
    header();
    claim("CPU: fixed cost of an MLP step (anchor: a product's)", step["fixed cost per call, CPU"], product["fixed cost per call, CPU"], "us",
          aboveTimes(5));
    const Measured figures = runLab("crossover", {{"gpu", gpu}, {"workload", "matmul"}, {"max_size", "32"}, {"size", "8"}, {"budget", "0.05"}});
    header();
    claim("emulated GPU: arithmetic rate (anchor: the CPU's)", figures["arithmetic rate, GPU"], figures["arithmetic rate, CPU"], "GFLOP/s", within(0.33, 3));
    claim("emulated GPU: memory bandwidth (anchor: the CPU's)", figures["memory bandwidth, GPU"], figures["memory bandwidth, CPU"], "GB/s", within(0.33, 3));
    claim("emulated GPU: speed at n = 8 (anchor: the CPU's)", figures["GPU speed-up at the smallest size"], 1.0, "x",
          noDirection("depends on how the host and the stream's thread hand over"));
  }
  if (const auto g = realGpu()) {
    const Measured s = runLab("crossover", {{"gpu", g->str()}, {"workload", "matmul"}, {"max_size", "2048"}, {"size", "1024"}});
    header();
    claim("GPU: speed at n = 8 (anchor: the CPU's)", s["GPU speed-up at the smallest size"], 1.0, "x", belowTimes(1.0));
    claim("GPU: speed at n = 2048 (anchor: the CPU's)", s["GPU speed-up at the largest size"], 1.0, "x", aboveTimes(1.0));
    claim("GPU: crossover size (anchor: n = 8)", s["crossover found"] ? s["crossover size"] : NAN, 8.0, "n", aboveTimes(1.0));
    const Measured step = runLab("crossover", {{"gpu", g->str()}, {"workload", "mlp"}, {"max_size", "2048"}, {"size", "1024"}});
    header();
    claim("GPU: fixed cost of an MLP step (anchor: a product's)", step["fixed cost per call, GPU"], s["fixed cost per call, GPU"], "us", aboveTimes(5));
    claim("GPU: an MLP step's speed at n = 8 (anchor: the CPU's)", step["GPU speed-up at the smallest size"], 1.0, "x", belowTimes(1.0));
    claim("GPU: an MLP step's crossover size (anchor: n = 8)", step["crossover found"] ? step["crossover size"] : NAN, 8.0, "n",
          noDirection("the lesson leaves it to the run"));
  }
}

// The cnn lab (lesson 8): one epoch of 6,000 images, tested on 2,000, on the CPU, as test_cnn_lab.cpp ran it.
void cnn() {
  const Measured s = runLab("cnn", {{"device", "cpu"}, {"epochs", "1"}, {"train_subset", "6000"}, {"test_subset", "2000"}, {"log_every", "20"}});
  header();
  claim("CPU: a CNN epoch (anchor: the MLP's)", s["CNN: epoch time"], s["MLP: epoch time"], "s", aboveTimes(1.0));
  claim("CPU: the CNN's multiply-adds per image (anchor: the MLP's)", s["CNN: multiply-adds per image"], s["MLP: multiply-adds per image"], "",
        noDirection("a count, which test_cnn_lab checks"));
}

// The cudnn lab's benchmark mode on a GPU: the first step pays for the search.
void cudnn() {
  const auto g = realGpu();
  if (!g) {
    std::printf("\ncudnn lab: no GPU here (cuDNN runs only on an NVIDIA GPU)\n");
    return;
  }
  const Measured s = runLab("cudnn", {{"device", g->str()}, {"experiment", "benchmark"}, {"steps", "5"}, {"batch_size", "64"}});
  header();
  claim("GPU, benchmark on: the first step (anchor: the median step)", s["benchmark on: first step"], s["benchmark on: median step"], "ms",
        aboveTimes(1.0));
  claim("GPU: the median step, benchmark on (anchor: off)", s["benchmark on: median step"], s["benchmark off: median step"], "ms",
        noDirection("the heuristics and the search may agree"));
}

}  // namespace

int main(int argc, char** argv) {
  QCoreApplication app(argc, argv);  // a Python lab runs in a session of its own, which Qt's event loop drives
  std::set<std::string> only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string name; std::getline(list, name, ',');) only.insert(name);
    } else {
      std::fprintf(stderr, "usage: gpulab-bench-labs [--only feeding,crossover,cnn,cudnn]\n");
      return 2;
    }
  }
  std::printf("devices: cpu%s%s\n", emulatedGpu() ? (", " + emulatedGpu()->str() + " (emulated GPU)").c_str() : "",
              realGpu() ? (", cuda:0 (" + cuda::deviceLabel(*realGpu()) + ")").c_str() : "");
  const std::vector<std::pair<std::string, void (*)()>> sections = {{"feeding", feeding}, {"crossover", crossover}, {"cnn", cnn}, {"cudnn", cudnn}};
  int failed = 0;
  for (const auto& [name, section] : sections) {
    if (!only.empty() && !only.count(name)) continue;
    try {
      section();
    } catch (const std::exception& e) {
      std::printf("\n%s: not measured: %s\n", name.c_str(), e.what());
      ++failed;
    }
  }
  std::printf("\n%d of %d claims with a direction held in this run%s\n", held, claims, failed ? "; some labs did not run" : "");
  return failed ? 1 : 0;
}
