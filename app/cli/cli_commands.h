#pragma once
// The commands of gpulab-cli, callable from tests: each takes the arguments after the command name,
// writes to the given streams and returns the process exit code (0 ok, 1 failed, 2 bad usage).
#include <QStringList>
#include <QTextStream>

namespace gpulab::cli {

int devicesCommand(const QStringList& args, QTextStream& out, QTextStream& err);
int trainCommand(const QStringList& args, QTextStream& out, QTextStream& err);
int memoryCommand(const QStringList& args, QTextStream& out, QTextStream& err);
int lessonsCommand(QStringList args, QTextStream& out, QTextStream& err);
int lessonCommand(QStringList args, QTextStream& out, QTextStream& err);
// Asks a running train command to stop after its current step (safe from a signal handler).
void requestStop();

}  // namespace gpulab::cli
