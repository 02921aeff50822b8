// gpulab-cli run: a PyTorch script run as written, with `import torch` giving GPU Lab's torch. The
// command hands the script to Debian's Python 3 (`python3 -m gpulab`, python/gpulab/__main__.py), in
// place of this process: the interpreter then owns the terminal, Ctrl+C (a KeyboardInterrupt, exit
// status 130), tracebacks and the exit status (1 on an uncaught exception), exactly as `python3
// script.py` would.
#include <QFileInfo>
#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <vector>

#include "app/cli/cli_commands.h"
#include "app/notebook/python_environment.h"

namespace gpulab::cli {

namespace {

const char* kRunUsage =
    "usage: gpulab-cli run [--emulated-gpu] SCRIPT.py [ARGS...]\n"
    "\n"
    "Runs a PyTorch script with `import torch` giving GPU Lab's torch (PyTorch's API on GPU Lab's engine).\n"
    "  --emulated-gpu   cuda:0 is GPU Lab's emulated GPU (its own memory and allocator; computes on the CPU)\n"
    "                   when this machine has no usable GPU; without it, CUDA code behaves as PyTorch's does\n"
    "                   on a machine without a GPU\n"
    "The script's output, its traceback and its exit status are Python's (1 on an uncaught exception, 130\n"
    "when Ctrl+C stops it). GPULAB_PYTHON names another interpreter than /usr/bin/python3.\n";

}  // namespace

int runScriptCommand(QStringList args, QTextStream& out, QTextStream& err) {
  bool emulated = false;
  if (!args.isEmpty() && (args.first() == "--help" || args.first() == "-h")) {
    out << kRunUsage;
    return kExitOk;
  }
  if (!args.isEmpty() && args.first() == "--emulated-gpu") {
    emulated = true;
    args.removeFirst();
  }
  if (args.isEmpty()) {
    err << "gpulab-cli run: no script given\n" << kRunUsage;
    return kExitUsage;
  }
  if (args.first().startsWith("--")) {
    err << "gpulab-cli run: unknown option '" << args.first() << "'\n" << kRunUsage;
    return kExitUsage;
  }
  if (!QFileInfo(args.first()).isFile()) {
    err << "gpulab-cli run: no such file: " << args.first() << "\n";
    return kExitUsage;
  }
  const QByteArray python = notebook::pythonExecutable();
  if (const QByteArray path = notebook::pythonPathWithPackage(qgetenv("PYTHONPATH")); !path.isEmpty()) qputenv("PYTHONPATH", path);
  qputenv("GPULAB_EMULATED_GPU", emulated ? "1" : "0");

  std::vector<QByteArray> words = {python, "-m", "gpulab"};
  for (const QString& a : args) words.push_back(a.toLocal8Bit());
  std::vector<char*> argv;
  for (QByteArray& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  out.flush();
  err.flush();
  ::execv(python.constData(), argv.data());
  err << "gpulab-cli run: cannot start " << python << ": " << std::strerror(errno)
      << " (GPU Lab's torch runs on Debian's Python 3: apt-get install python3)\n";
  return kExitFailed;
}

}  // namespace gpulab::cli
