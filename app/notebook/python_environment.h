#pragma once
// Where GPU Lab finds the Python that runs PyTorch code on its engine: Debian's python3 (or the one
// GPULAB_PYTHON names) with the gpulab package -- from the build tree when the program runs from one
// (<build>/python beside <build>/bin), else from python3-gpulab's install in dist-packages. Shared by
// `gpulab-cli run` and the notebook kernel, so both find the same package the same way.
#include <QByteArray>
#include <QProcessEnvironment>
#include <QString>

#include "app/notebook/machine.h"

namespace gpulab::notebook {

// The interpreter: $GPULAB_PYTHON, else /usr/bin/python3.
QByteArray pythonExecutable();
// <build>/python when this program runs from a build tree that has the package; empty otherwise.
QString buildTreePackageDir();
// PYTHONPATH with the build tree's package first (unchanged when installed), and GPULAB_EMULATED_GPU
// set as asked.
QByteArray pythonPathWithPackage(const QByteArray& existing);
QProcessEnvironment pythonEnvironment(bool emulatedGpu);
// The same for `machine`: this one, or one an exercise grades on (machine.h).
QProcessEnvironment pythonEnvironment(const Machine& machine);

}  // namespace gpulab::notebook
