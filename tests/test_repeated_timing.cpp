// The rule every timed claim of the lessons goes by (lessons/labs/repeated_timing.h): one side is
// "faster" only when every run of it beat every run of the other; overlapping spreads, or a single run
// each, say "no clear difference". The labs' own tests check that each sentence agrees with its numbers;
// these check the rule itself, on spreads made up to sit on each side of it.
#include <QtTest>

#include "engine/core/number_format.h"
#include "lessons/labs/repeated_timing.h"

using namespace gpulab::labs;

class TestRepeatedTiming : public QObject {
  Q_OBJECT

 private slots:
  void aSpreadIsTheMedianAndTheRange() {
    const Spread s = spreadOf({3.0, 1.0, 2.0, 10.0});
    QCOMPARE(s.median, 2.5);
    QCOMPARE(s.low, 1.0);
    QCOMPARE(s.high, 10.0);
    QCOMPARE(s.runs, std::size_t(4));
    QVERIFY(std::isnan(spreadOf({}).median));
    // From 10 runs, one outlier at each end is set aside (a burst of another program, not the code).
    const Spread many = spreadOf({9.0, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 0.1});
    QCOMPARE(many.low, 1.0);
    QCOMPARE(many.high, 1.7);
    QCOMPARE(many.runs, std::size_t(10));
    QCOMPARE(spreadOf({}).runs, std::size_t(0));
  }

  void aRateSpreadReversesItsRange() {
    const Spread rate = reciprocalOf(spreadOf({0.5, 0.25, 1.0}), 100.0);  // seconds for 100 steps
    QCOMPARE(rate.median, 200.0);
    QCOMPARE(rate.low, 100.0);   // the slowest run
    QCOMPARE(rate.high, 400.0);  // the fastest
  }

  void onlySeparateSpreadsDiffer() {
    const Spread fast = spreadOf({1.0, 1.1, 1.2}), slow = spreadOf({1.3, 1.5, 1.4});
    QVERIFY(compare(fast, slow) == Difference::Lower);
    QVERIFY(compare(slow, fast) == Difference::Higher);
    // One run of the slow side inside the fast side's range: no clear difference, whatever the medians.
    const Spread overlapping = spreadOf({1.15, 1.5, 1.4});
    QVERIFY(compare(fast, overlapping) == Difference::Unclear);
    // A single run has no spread: nothing can be told from it.
    QVERIFY(compare(spreadOf({1.0}), spreadOf({2.0})) == Difference::Unclear);
  }

  // Issue 48, 4.6: a turning point ("faster from n = ...") needs a difference larger than the spread.
  // Lesson 14 named a crossover at a 1.009x speed-up: two tight ranges that did not touch.
  void aTurningPointNeedsMoreThanTheSpread() {
    const Spread cpu = spreadOf({47.3, 47.55, 47.6, 47.65, 47.7}), gpu = spreadOf({46.6, 47.1, 47.15, 47.2, 47.25});
    QVERIFY(compare(gpu, cpu) == Difference::Lower);                        // the ranges are apart (47.25 < 47.3)...
    QVERIFY(cpu.median / gpu.median > 1.009 && cpu.median / gpu.median < 1.01);
    QVERIFY(compareBeyondSpread(gpu, cpu) == Difference::Unclear);          // ...but the medians by 0.45, a range 0.65 wide
    const Spread wide = spreadOf({30.0, 31.0, 30.5, 30.2, 30.8});            // 1.56x, ranges 1 and 0.4 wide
    QVERIFY(compareBeyondSpread(wide, cpu) == Difference::Lower);
    QVERIFY(compareBeyondSpread(cpu, wide) == Difference::Higher);
    QVERIFY(compareBeyondSpread(gpu, spreadOf({47.15, 48.0, 47.9})) == Difference::Unclear);  // overlapping: never
    QVERIFY(compareBeyondSpread(spreadOf({1.0}), spreadOf({2.0})) == Difference::Unclear);   // one run: never
  }

  // "3.204e+04 steps/s" is a number to decode, not to read (issue 27 §4).
  void spreadsAreWrittenForPeople() {
    QCOMPARE(spreadText(spreadOf({32040.4, 31480.0, 32450.0}), "steps/s", 4), std::string("32040 steps/s (31480 to 32450, 3 runs)"));
    QCOMPARE(spreadText(spreadOf({0.125}), "ms"), std::string("0.125 ms (1 run)"));
    QCOMPARE(gpulab::formatReadable(1.344e4, 3), std::string("13440"));
    QCOMPARE(gpulab::formatReadable(6.65233, 3), std::string("6.65"));
    QCOMPARE(gpulab::formatReadable(4.989e24, 4), std::string("4.989e+24"));
  }

  void theMedianRunAndTheRangeColumn() {
    QCOMPARE(medianIndex({3.0, 1.0, 2.0}), std::size_t(2));
    QCOMPARE(medianIndex({4.0, 1.0, 3.0, 2.0}), std::size_t(3));  // the lower middle of an even count
    QCOMPARE(rangeText(spreadOf({0.0125, 0.0110, 0.0141}), 1e3), std::string("11 to 14.1"));
  }

  void theSentenceSaysWhatTheSpreadsAllow() {
    const Spread fast = spreadOf({0.010, 0.011, 0.012}), slow = spreadOf({0.020, 0.022, 0.024});
    const std::string faster = comparedTimes(fast, slow, "the other");
    QVERIFY2(faster.find("2x faster than the other in every run") != std::string::npos, faster.c_str());
    const std::string slower = comparedTimes(slow, fast, "the other");
    QVERIFY2(slower.find("2x slower than the other in every run") != std::string::npos, slower.c_str());
    const std::string unclear = comparedTimes(spreadOf({0.010, 0.030, 0.020}), slow, "the other");
    QVERIFY2(unclear.find("no clear difference") != std::string::npos && unclear.find("faster") == std::string::npos &&
                 unclear.find("slower") == std::string::npos,
             unclear.c_str());
    const std::string once = comparedTimes(spreadOf({0.010}), spreadOf({0.020}), "the other");
    QVERIFY2(once.find("no clear difference") != std::string::npos && once.find("one run") != std::string::npos, once.c_str());
  }
};

QTEST_GUILESS_MAIN(TestRepeatedTiming)
#include "test_repeated_timing.moc"
