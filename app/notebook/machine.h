#pragma once
// The machine a session's code runs on. A lesson's cells run on this machine as it is (its real GPUs,
// or the emulated GPU as cuda:0); an exercise whose rule depends on the machine grades the learner's
// code on others too (lessons/README.md, "machines"): one without any GPU, and GPUs of several sizes
// -- "the cap is 256 MiB on a 4, 16, 40 and 80 GiB GPU" -- each an emulated GPU of that memory as
// cuda:0, whatever GPUs this machine has (they are hidden from that session).
#include <QProcessEnvironment>
#include <QString>
#include <cstdint>
#include <optional>

namespace gpulab::notebook {

struct Machine {
  enum class Kind { ThisMachine, NoGpu, EmulatedGpu };
  Kind kind = Kind::ThisMachine;
  bool emulatedGpu = false;          // ThisMachine: with the emulated GPU (after the real ones)
  std::int64_t gpuMemoryBytes = 0;   // EmulatedGpu: its memory

  static Machine thisMachine(bool emulatedGpu) { return {Kind::ThisMachine, emulatedGpu, 0}; }
  // An exercise's name for one: "no-gpu", or "gpu-16gib" (1 to 1024 GiB); nullopt for anything else.
  static std::optional<Machine> fromName(const QString& name);
  QString name() const;         // "no-gpu", "gpu-16gib" ("" for this machine)
  QString description() const;  // "a machine without a GPU", "a 16 GiB GPU (emulated)", "this machine"
  // Its environment variables set in `env` (CUDA_VISIBLE_DEVICES, GPULAB_EMULATED_GPU, _MEMORY).
  void applyTo(QProcessEnvironment& env) const;
};

}  // namespace gpulab::notebook
