#!/bin/sh
# Runs a Qt Test suite under ThreadSanitizer without the test functions matching SKIP (an extended
# regex), which the tsan preset leaves out for a reason other than a race:
#   tests/tsan_run.sh <suite executable> '<regex of function names>'
# Today: functions that start a QProcess -- Qt's QProcess starts children through forkfd's clone(),
# and LLVM 14's TSan runtime aborts in the child ("CHECK failed: tsan_rtl.cpp:234 ((!thr->slot)) != (0)"
# in __tsan::ForkAfter <- clone) before any race could be reported: a TSan/Qt limitation, not a race --
# and the feeding lab's functions that run its whole sweep again for its timelines and sentences (TSan
# slows each tenfold; the same workers, pinned copies and prefetcher run in the functions left in).
set -eu
exe=$1
skip=$2
fns=$("$exe" -functions | sed 's/()$//' | grep -Ev "^(initTestCase|cleanupTestCase|init|cleanup)$" | grep -Ev "^($skip)$" || true)
echo "tsan_run: running $(echo "$fns" | wc -w) functions of $(basename "$exe"), leaving out: $("$exe" -functions | sed 's/()$//' | grep -E "^($skip)$" | tr '\n' ' ')"
# shellcheck disable=SC2086
exec "$exe" $fns
