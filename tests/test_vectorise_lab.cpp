// The vectorise lesson (lessons/10-vectorise) makes claims from its run; these tests check the
// DIRECTION of each on this machine, through the vectorise lab:
// - one op over all rows beats the loop over pairs by far, and the loop over rows too;
// - all four forms compute the same distances (to float32 rounding), and the ops each runs are what
//   the lesson counts (4 per pair, 4 per chunk, 3, 8);
// - a chunk's memory grows with the chunk and stays below the one-op form's, so the challenge (a quarter
//   of the memory) is met by a middle chunk that is much faster than the loop over rows.
#include <algorithm>

#include "engine/core/errors.h"
#include "lab_runner.h"
#include "test_util.h"

using namespace gpulab;

namespace {

using test::measured;
using test::RecordingSink;

RecordingSink runVectorise(const std::map<std::string, std::string>& settings) { return test::runLabOn("vectorise", settings); }

// The "forms" table's rows by their first cell's opening words.
std::map<std::string, std::vector<lab::Value>> formRows(const RecordingSink& s) {
  std::map<std::string, std::vector<lab::Value>> rows;
  for (const lab::Row& r : s.all<lab::Row>()) {
    const std::string name = std::get<std::string>(r.cells[0]);
    rows[name.substr(0, name.find(':'))] = r.cells;
  }
  return rows;
}

}  // namespace

class TestVectoriseLab : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { GPULAB_SKIP_WITHOUT_PYTHON_LABS(); }

  // Issue 27 §2/§3: the forms take turns, round after round, and the times are medians; the sentence
  // about your chunk says what the spreads allow (the challenge once failed or passed on a noisy
  // minimum: "1.77x the fastest" on a flat curve).
  void theChunkSentenceAgreesWithTheSpreads() {
    for (const char* chunk : {"1", "8", "64"}) {
      const RecordingSink s = runVectorise({{"points", "256"}, {"centres", "32"}, {"features", "32"}, {"chunk", chunk}, {"loop_budget", "0.1"}});
      const auto it = std::find_if(s.messages.begin(), s.messages.end(), [](const std::string& t) { return t.find("Your chunk of") != std::string::npos; });
      QVERIFY(it != s.messages.end());
      const std::string said = it->substr(it->find("Your chunk of"));
      qInfo("chunk %s: %s", chunk, said.c_str());
      if (said.find("had the fastest median time") != std::string::npos) {
        QCOMPARE(measured(s, "chunked time relative to the fastest"), 1.0);
        continue;
      }
      // The challenge's ratio pairs the rounds: a chunk a hair slower by its median can be faster in
      // most rounds (below 1). Clearly slower -- every run slower than every run of the fastest -- is
      // slower in every round.
      const bool clearlySlower = measured(s, "chunked time, fastest run relative to the fastest chunk's slowest") > 1.0;
      if (clearlySlower) QVERIFY(measured(s, "chunked time relative to the fastest") > 1.0);
      QVERIFY2(said.find(clearlySlower ? "slower than the fastest chunk" : "no clear difference from the fastest chunk") != std::string::npos,
               said.c_str());
    }
  }

  // Issue 48 §5.1: the challenge's time asks whether a larger chunk would still pay -- your chunk
  // against each larger one, round by round -- which a busy machine does not turn around the way it
  // moves the curve's minimum (a right answer, 512 of 4096 rows, measured 1.4-1.6x "the fastest").
  void theChallengeAsksWhetherALargerChunkPays() {
    const RecordingSink largest = runVectorise({{"points", "256"}, {"centres", "32"}, {"features", "32"}, {"chunk", "256"}, {"loop_budget", "0.1"}});
    QCOMPARE(measured(largest, "chunked time relative to the fastest larger chunk"), 1.0);  // none is larger
    const RecordingSink rows = runVectorise({{"points", "256"}, {"centres", "32"}, {"features", "32"}, {"chunk", "1"}, {"loop_budget", "0.1"}});
    const double larger = measured(rows, "chunked time relative to the fastest larger chunk");
    const auto it = std::find_if(rows.messages.begin(), rows.messages.end(), [](const std::string& t) { return t.find("Your chunk of") != std::string::npos; });
    QVERIFY(it != rows.messages.end());
    qInfo("chunk 1 of 256: %.2fx the fastest larger chunk; %s", larger, it->substr(it->find("Your chunk of")).c_str());
    // Every larger chunk is among those compared, so the largest ratio is at least the one to the
    // fastest chunk, whichever that is (all of them are larger than one row).
    QVERIFY(larger >= measured(rows, "chunked time relative to the fastest"));
    QVERIFY2(it->find("no larger chunk was faster") == std::string::npos, it->c_str());
#if defined(__SANITIZE_ADDRESS__)
    QSKIP("a claim about this machine's speed");
#endif
    QVERIFY2(larger > 2, "a loop of one-row ops pays the fixed cost 256 times: a larger chunk is much faster");
  }

  void oneOpBeatsTheLoops() {
    const RecordingSink s = runVectorise({{"points", "256"}, {"centres", "32"}, {"features", "32"}, {"chunk", "1"}});
    const double overPairs = measured(s, "vectorised speed-up over the per-pair loop");
    const double overRows = measured(s, "vectorised speed-up over the per-row loop");
    qInfo("one op: %.3f ms; per pair %.1f ms (%.0fx), per row %.3f ms (%.2fx)", measured(s, "one-op time"), measured(s, "per-pair loop time"),
          overPairs, measured(s, "per-row loop time"), overRows);
    QVERIFY(overPairs > 10);
#if defined(__SANITIZE_ADDRESS__)
    QSKIP("a claim about this machine's speed: AddressSanitizer slows every op's code, the fixed cost and the arithmetic alike");
#endif
    QVERIFY(overRows > 1);
  }

  void theFormsAgreeAndCountTheirOps() {
    const RecordingSink s = runVectorise({{"points", "96"}, {"centres", "20"}, {"features", "8"}, {"chunk", "32"}});
    QVERIFY(measured(s, "largest difference from the loop's result") < 1e-4);
    QVERIFY(measured(s, "matmul identity: largest difference from the loop's result") < 1e-3);
    QVERIFY(measured(s, "fixed cost per op") > 0);
    const auto rows = formRows(s);
    QCOMPARE(rows.size(), std::size_t(5));
    QCOMPARE(std::get<std::int64_t>(rows.at("pairs")[2]), 4 * 96 * 20);
    QCOMPARE(std::get<std::int64_t>(rows.at("rows")[2]), 4 * 96);
    QCOMPARE(std::get<std::int64_t>(rows.at("chunks of 32 rows (yours)")[2]), 4 * 3);
    QCOMPARE(std::get<std::int64_t>(rows.at("one op (broadcast)")[2]), 3);
    QCOMPARE(std::get<std::int64_t>(rows.at("matmul identity")[2]), 8);
    // The broadcast holds (n, m, d) intermediates; the identity only (n, m) matrices and vectors.
    QVERIFY(std::get<std::int64_t>(rows.at("one op (broadcast)")[5]) >= 2 * 96 * 20 * 8 * 4);
    QVERIFY(std::get<std::int64_t>(rows.at("matmul identity")[5]) < std::get<std::int64_t>(rows.at("one op (broadcast)")[5]));
  }

  void chunksTradeMemoryForOps() {
    const RecordingSink s = runVectorise({{"points", "512"}, {"centres", "32"}, {"features", "32"}, {"chunk", "64"}});
    const std::vector<lab::Point> memory = s.points("sweep_memory", "chunked");
    QCOMPARE(memory.size(), std::size_t(10));  // 1, 2, 4, ..., 512
    for (std::size_t i = 1; i < memory.size(); ++i) QVERIFY2(memory[i].y > memory[i - 1].y, "memory grows with the chunk");
    QCOMPARE(memory.back().x[0], 512.0);
    QVERIFY(measured(s, "chunked memory relative to one op") < 0.25);
#if defined(__SANITIZE_ADDRESS__)
    QSKIP("a claim about this machine's speed");
#endif
    const std::vector<lab::Point> time = s.points("sweep_time", "chunked");
    QVERIFY2(time.front().y > time.back().y, "a loop of one-row ops is slower than one op");
    // The lesson's advice, as a direction: a middle chunk (64 rows) is much faster than the loop over
    // rows while it holds a fraction of the one op's memory. (How close it comes to the fastest chunk
    // is the challenge's business, read from the learner's run: a threshold on this machine's timing
    // noise is no test.)
    const auto at64 = std::find_if(time.begin(), time.end(), [](const lab::Point& p) { return p.x[0] == 64.0; });
    QVERIFY(at64 != time.end());
    qInfo("chunk 64 of 512 rows: %.3f ms, one row per op %.3f ms; %.2fx the fastest chunk's time", at64->y, time.front().y,
          measured(s, "chunked time relative to the fastest"));
    QVERIFY2(at64->y < time.front().y / 2, "64 rows per op at least halves the per-row loop's time");
  }

  void tooLargeIsRefusedBeforeAllocating() {
    try {
      runVectorise({{"points", "1048576"}, {"centres", "65536"}, {"features", "64"}});
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("choose fewer points, centres or features") != std::string::npos, e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestVectoriseLab)
#include "test_vectorise_lab.moc"
