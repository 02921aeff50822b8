#pragma once
// OpenBLAS's kernels for this CPU. Debian 12's OpenBLAS (0.3.21) chooses its kernels once, when the
// library loads, from its own table of CPU models, and a processor newer than that table -- a recent
// AVX-512 Xeon, say -- gets the "Prescott" SSE3 kernels: every matrix product 2-3x slower than the CPU
// can do (the Fashion-MNIST MLP's epoch took 1.70 s instead of 0.85 s on such a machine). The variable
// OPENBLAS_CORETYPE overrides the choice, but only before the library loads. So a GPU Lab program
// whose OpenBLAS took a generic core on a CPU with better instructions sets it and runs itself again,
// once, before it does anything else (ensureBestBlasKernels, first thing in main): learners get the
// right kernels without knowing the variable exists.
#include <string>

#include "engine/core/cpu_features.h"

namespace gpulab {

// openblas_get_corename(): "Haswell", "Zen", "SkylakeX", "Prescott", ...
std::string blasCoreName();

// The OPENBLAS_CORETYPE to ask for when OpenBLAS took one of its generic pre-AVX cores ("Prescott",
// "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Coppermine", "Northwood", "Banias",
// "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Nano") on a CPU that has more: "SkylakeX" (AVX-512
// F/DQ/BW/VL), "Haswell" (AVX2 and FMA), "Sandybridge" (AVX). Empty when OpenBLAS's choice stands (it
// recognised the CPU, or the CPU has nothing better).
std::string betterBlasCore(const std::string& corename, const CpuFeatures& features);

// The re-exec described above. Does nothing when OPENBLAS_CORETYPE is already set (by the learner, or
// by this function on the first run: the second run finds it set), when betterBlasCore has nothing to
// ask for, or when re-executing fails (the program then goes on with the kernels it has).
void ensureBestBlasKernels(char** argv);

// One line for `gpulab-cli devices` and the About box: "OpenBLAS 0.3.21 kernels: Haswell" and, when
// GPU Lab chose them, "(chosen by GPU Lab: OpenBLAS took Prescott for this CPU)".
std::string blasKernelsSummary();

}  // namespace gpulab
