// A deliberate data race, run only in the `tsan` configuration with WILL_FAIL: it proves that the
// TSan stage still catches a race in GPU Lab's own code under the options and suppressions the
// tsan preset uses (tests/tsan.supp, ignore_noninstrumented_modules=1), so a suppression that grew
// too wide shows up as this test passing.
//
// The two writes come one after the other, ordered only by relaxed atomics (which TSan does not count
// as synchronisation), and the first thread is still alive at the second write: two threads bumping
// the counter at once let one CI run pass, since TSan can miss two accesses made at the same instant,
// or a race with a thread that has already ended.
#include <atomic>
#include <thread>

namespace {
int counter = 0;  // unsynchronised on purpose
std::atomic<int> stage{0};

void first() {
  counter = counter + 1;
  stage.store(1, std::memory_order_relaxed);
  while (stage.load(std::memory_order_relaxed) < 2) std::this_thread::yield();  // alive until the second write
}

void second() {
  while (stage.load(std::memory_order_relaxed) < 1) std::this_thread::yield();
  counter = counter + 1;  // the race: nothing orders this after first()'s write for TSan
  stage.store(2, std::memory_order_relaxed);
}
}  // namespace

int main() {
  std::thread a(first), b(second);
  a.join();
  b.join();
  return counter > 0 ? 0 : 1;  // exit 0: only TSan's report (exitcode 66) makes this fail
}
