#pragma once
// The commands of gpulab-cli, callable from tests: each takes the arguments after the command name,
// writes to the given streams and returns the process exit status (below). Each answers --help.
#include <QJsonObject>
#include <QStringList>
#include <QTextStream>

namespace gpulab::cli {

// The exit status of every command, as kExitStatusHelp documents it. Arguments are checked before a
// run starts, so 2 always means "fix the command line" and 1 "the run itself failed".
enum ExitStatus : int {
  kExitOk = 0,
  kExitFailed = 1,  // the run failed: an error the engine raised, a missing data set, a broken lesson
  kExitUsage = 2,   // invalid arguments: unknown command/option, bad value, a device this machine cannot use
  kExitInterrupted = 130,  // stopped by Ctrl+C (SIGINT) or SIGTERM before its end: 128 + SIGINT, as shells say
};
extern const char* const kExitStatusHelp;

// One JSON object as one line: what --json prints.
QString jsonLine(const QJsonObject& o);

int devicesCommand(const QStringList& args, QTextStream& out, QTextStream& err);
int trainCommand(const QStringList& args, QTextStream& out, QTextStream& err);
int memoryCommand(const QStringList& args, QTextStream& out, QTextStream& err);
int lessonsCommand(QStringList args, QTextStream& out, QTextStream& err);
int lessonCommand(QStringList args, QTextStream& out, QTextStream& err);
// gpulab-cli run [--emulated-gpu] SCRIPT.py [ARGS...] (run_command.cpp): replaces this process with
// Python running the script on GPU Lab's torch; returns only when that cannot start.
int runScriptCommand(QStringList args, QTextStream& out, QTextStream& err);
// Asks a running command to stop after its current step (safe from a signal handler): the run ends
// early, says so, and the command exits with kExitInterrupted; `lesson` runs no further run block.
void requestStop();

}  // namespace gpulab::cli
