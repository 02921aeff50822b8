#pragma once
// Files the engine writes for the learner (a memory snapshot, a profiler trace): whole or not at all,
// and never through something that is not a file of theirs. The data goes to a new temporary beside
// the target (created exclusively, mkstemp: it follows no link), is flushed to disk, then renamed
// over the target, so a crash or a full disk leaves the old file (or none), never half of one.
// A target that exists and is not a regular file -- a symbolic link, a device such as /dev/null, a
// FIFO, a folder -- is refused by name: writing there as root would replace or reach what it points
// at. A temporary that a killed writer left behind (its process is gone) is removed by the next
// write to the same target.
#include <string>
#include <string_view>

namespace gpulab {

// Throws IOError "cannot write <what> '<path>': <why>" (what: "the memory snapshot").
void writeFileAtomically(const std::string& path, std::string_view data, const std::string& what);

// Where GPU Lab keeps files it writes for this user when nobody named a place (a profiler trace):
// $XDG_CACHE_HOME/gpulab, else ~/.cache/gpulab, created for this user only (0700). Never a shared
// folder such as /tmp, where another user could have put a link or a file of their own first.
std::string userCacheFolder();

}  // namespace gpulab
