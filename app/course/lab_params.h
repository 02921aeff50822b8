#pragma once
// The parameter types a lesson's ```lab block may declare that need more than lab::Params' own checks
// (lessons/README.md): hidden layer widths and a device. Their validators run where a value is set --
// a lesson file at load, the command line, the player's form -- so that a bad value is named there,
// before a lab's Python session starts.
#include <string>

#include "engine/lab/lab.h"

namespace gpulab::course {

// "256,128,100": at most 64 widths from 1 to 65536, and no more parameters between them than this
// machine's memory can train; throws ValueError saying what is wrong (Params adds the value and name).
void checkHiddenWidths(const std::string& text);
// "auto", "cpu", "cuda", "cuda:N": the syntax only. Whether this machine has that GPU is the run's
// business (a lesson that says cuda must still load on a machine without one).
void checkDeviceString(const std::string& text);
// A device parameter: "auto" or a device string, offered as a choice of this machine's devices (auto,
// cpu, its GPUs, the emulated GPU).
lab::ParamSpec deviceParam(std::string name, std::string description);

}  // namespace gpulab::course
