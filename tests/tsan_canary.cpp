// A deliberate data race, run only in the `tsan` configuration with WILL_FAIL: it proves that the
// TSan stage still catches a race in GPU Lab's own code under the options and suppressions the
// tsan preset uses (tests/tsan.supp, ignore_noninstrumented_modules=1), so a suppression that grew
// too wide shows up as this test passing.
#include <thread>

namespace {
int counter = 0;  // unsynchronised on purpose
void bump() {
  for (int i = 0; i < 100000; ++i) counter = counter + 1;
}
}  // namespace

int main() {
  std::thread a(bump), b(bump);
  a.join();
  b.join();
  return counter > 0 ? 0 : 1;  // exit 0: only TSan's report (exitcode 66) makes this fail
}
