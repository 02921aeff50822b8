// gpulab-cli: GPU Lab's engine without the GUI, running the same labs the lessons run.
#include <QCoreApplication>
#include <csignal>

#include "engine/runtime/blas_kernels.h"
#include "app/cli/cli_commands.h"
#include "engine/core/version.h"

namespace {

const char* kUsage =
    "usage: gpulab-cli <command> [options]\n"
    "\n"
    "commands:\n"
    "  devices [--json]             what devices exist, and why no GPU is usable if none is\n"
    "  train [options] [--json]     train and evaluate a model (the 'train' lab; it is Python,\n"
    "                               lessons/03-training-loop/train_lab.py)\n"
    "      --dataset regression|fashion-mnist   --model mlp|cnn   --hidden W[,W...]\n"
    "      --optimizer sgd|adam|adamw   --lr X   --momentum X   --weight-decay X\n"
    "      --batch-size N   --epochs N   --device auto|cpu|cuda[:N]   --seed N\n"
    "      [--accumulate N] [--workers N] [--pin-memory] [--samples N] [--train-subset N] [--log-every N]\n"
    "      [--amp fp16|bf16] [--no-grad-scaler] [--tf32]   mixed precision (autocast, GradScaler), TF32\n"
    "      [--cudnn-benchmark] [--deterministic]   cuDNN's algorithm choice for the cnn's convolutions (CUDA)\n"
    "      [--cuda-graph]   capture the whole training step in a CUDA graph and replay it (a GPU, real or emulated)\n"
    "  memory --oom-sweep|--report [options] [--json]\n"
    "                               run out of memory on purpose and recover; or allocated vs reserved\n"
    "                               vs driver-used memory before and after empty_cache()\n"
    "      --dataset regression|fashion-mnist   --grow batch|width   --start-batch N   --start-width N\n"
    "      --steps N   --accumulate true|false   --cap-mb N   --fraction F   --device auto|cuda[:N]   --seed N\n"
    "                               (a GPU's memory: without one, the emulated GPU's; the lab is Python,\n"
    "                               lessons/04-where-memory-goes/memory_lab.py)\n"
    "  lessons [--lessons DIR]      the lessons, one a line: id, title, whether it loaded cleanly\n"
    "  lesson ID [--quick | --check-challenges | --check-exercises] [--json] [--lessons DIR]\n"
    "                               runs every run block of a lesson (short variants with --quick)\n"
    "  run [--emulated-gpu] SCRIPT.py [ARGS...]\n"
    "                               runs a PyTorch script on GPU Lab's engine (`import torch` is GPU Lab's)\n"
    "\n"
    "gpulab-cli COMMAND --help      the command's options: type, range, default and what each does\n"
    "gpulab-cli --version           the version\n"
    "\n";

void onSignal(int) { gpulab::cli::requestStop(); }

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: with the wrong OpenBLAS kernels this runs itself again, once (blas_kernels.h).
  gpulab::ensureBestBlasKernels(argv);
  QCoreApplication app(argc, argv);
  QCoreApplication::setApplicationName("gpulab-cli");
  QTextStream out(stdout), err(stderr);
  QStringList args = app.arguments().mid(1);
  using namespace gpulab::cli;
  if (args.isEmpty() || args.first() == "--help" || args.first() == "-h" || args.first() == "help") {
    (args.isEmpty() ? err : out) << kUsage << kExitStatusHelp;
    return args.isEmpty() ? kExitUsage : kExitOk;
  }
  if (args.first() == "--version") {
    out << "gpulab-cli " << gpulab::version() << "\n";
    return kExitOk;
  }
  const QString command = args.takeFirst();
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  if (command == "devices") return devicesCommand(args, out, err);
  if (command == "train") return trainCommand(args, out, err);
  if (command == "memory") return memoryCommand(args, out, err);
  if (command == "lessons") return lessonsCommand(args, out, err);
  if (command == "lesson") return lessonCommand(args, out, err);
  if (command == "run") return runScriptCommand(args, out, err);
  err << "gpulab-cli: unknown command '" << command << "'\n" << kUsage << kExitStatusHelp;
  return kExitUsage;
}
