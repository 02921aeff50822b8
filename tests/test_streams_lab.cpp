// The streams lesson (lessons/13-streams) makes claims from its run; these tests check the DIRECTION of
// each through the streams lab:
// - the serial and the overlapped passes compute the same outputs (their checksums agree);
// - a non_blocking copy to the host read at once is wrong (the race), and right after
//   torch.cuda.synchronize() or an event recorded after the copy;
// - a second stream that reads a tensor without wait_stream gets it wrong, and right with it;
// - on a GPU, copies on a stream of their own overlap the compute: the pass is faster than on one
//   stream (on the emulated GPU the streams are threads of this machine's one core: not asserted);
// - the CPU has no streams, and the lab says so by name.
// ctest runs this suite alone (RUN_SERIAL): the emulated GPU's streams need the machine's cores.
#include "engine/core/errors.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "lab_runner.h"
#include "test_util.h"

using namespace gpulab;

namespace {

using test::measured;
using test::RecordingSink;

RecordingSink runStreams(const std::map<std::string, std::string>& settings, const std::string& device) {
  return test::runLabOn("streams", settings, device);
}

// The device the races are shown on: a GPU where there is one, else the emulated GPU.
std::string streamsDevice() {
  if (cuda::isAvailable()) return "cuda:0";
  return cuda::emulatedDevice() ? cuda::emulatedDevice()->str() : std::string();
}

}  // namespace

class TestStreamsLab : public QObject {
  Q_OBJECT

 private slots:
  void theRaceIsWrongAndEachFixIsRight_data() {
    QTest::addColumn<QString>("fix");
    QTest::addColumn<bool>("right");
    QTest::newRow("none") << "none" << false;
    QTest::newRow("synchronize") << "synchronize" << true;
    QTest::newRow("event") << "event" << true;
  }
  void theRaceIsWrongAndEachFixIsRight() {
    QFETCH(QString, fix);
    QFETCH(bool, right);
    const std::string device = streamsDevice();
    if (device.empty()) QSKIP("no GPU and the emulated GPU is off");
    const RecordingSink s = runStreams({{"chunks", "2"}, {"chunk_mb", "1"}, {"repeats", "1"}, {"fix", fix.toStdString()}}, device);
    QCOMPARE(measured(s, "host read correct (yours)"), right ? 1.0 : 0.0);
    QCOMPARE(measured(s, "host read correct after synchronize"), 1.0);
    QCOMPARE(measured(s, "second stream correct without wait_stream"), 0.0);
    QCOMPARE(measured(s, "second stream correct with wait_stream"), 1.0);
    QVERIFY(measured(s, "checksum difference") < 1e-6);
  }

  void onAGpuTwoStreamsOverlap() {
    if (!cuda::isAvailable()) QSKIP("no GPU here: the emulated GPU's streams share this machine's cores, so overlap is not asserted");
    const RecordingSink s = runStreams({{"chunks", "16"}, {"chunk_mb", "16"}, {"repeats", "3"}}, "cuda:0");
    qInfo("GPU: two streams %.2fx as fast as one (serial %.2f ms, overlapped %.2f ms)", measured(s, "overlap speed-up"),
          measured(s, "serial pass time"), measured(s, "overlapped pass time"));
    QVERIFY(measured(s, "overlap speed-up") > 1.2);
  }

  void theCpuHasNoStreams() {
    try {
      runStreams({{"repeats", "1"}}, "cpu");
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("streams belong to CUDA devices") != std::string::npos, e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestStreamsLab)
#include "test_streams_lab.moc"
