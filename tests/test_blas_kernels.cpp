// OpenBLAS's kernels (engine/runtime/blas_kernels.h): which core GPU Lab asks for when OpenBLAS took a
// generic one, on CPUs described by their instruction sets; that a recognised core is left alone; and
// that `gpulab-cli devices` names the kernels this machine runs, and runs itself again with a better
// core when OpenBLAS took a generic one (the re-exec end to end, with OpenBLAS's first choice pretended).
#include <QProcess>
#include <QProcessEnvironment>

#include "engine/runtime/blas_kernels.h"
#include "test_util.h"

using namespace gpulab;

class TestBlasKernels : public QObject {
  Q_OBJECT

 private slots:
  void genericCoresAreReplacedByWhatTheCpuCanRun() {
    CpuFeatures sse;
    CpuFeatures avx;
    avx.avx = true;
    CpuFeatures avx2 = avx;
    avx2.fma = avx2.avx2 = true;
    CpuFeatures avx512 = avx2;
    avx512.avx512 = true;
    QCOMPARE(betterBlasCore("Prescott", avx512), std::string("SkylakeX"));  // Debian 12's OpenBLAS on a new Xeon
    QCOMPARE(betterBlasCore("Prescott", avx2), std::string("Haswell"));
    QCOMPARE(betterBlasCore("Nehalem", avx), std::string("Sandybridge"));
    QCOMPARE(betterBlasCore("Barcelona", avx2), std::string("Haswell"));  // an AMD CPU it did not know
    QCOMPARE(betterBlasCore("Prescott", sse), std::string());              // nothing better to ask for
    QCOMPARE(betterBlasCore("Haswell", avx512), std::string());            // recognised: its choice stands
    QCOMPARE(betterBlasCore("Zen", avx2), std::string());
    QCOMPARE(betterBlasCore("SkylakeX", avx512), std::string());
  }

  void featuresAreConsistent() {
    const CpuFeatures& f = cpuFeatures();
    if (f.avx2 || f.fma || f.f16c) QVERIFY(f.avx);
    if (f.avx512) QVERIFY(f.avx2);
    QVERIFY(!blasCoreName().empty());
    qInfo("this CPU: avx %d fma %d avx2 %d avx512 %d f16c %d; %s", f.avx, f.fma, f.avx2, f.avx512, f.f16c,
          blasKernelsSummary().c_str());
  }

  void theCliRunsItselfAgainWithBetterKernels() {
    const std::string better = betterBlasCore("Prescott", cpuFeatures());
    if (better.empty()) QSKIP("this CPU has no instruction set beyond OpenBLAS's generic cores");
    auto devices = [](const QProcessEnvironment& env) {
      QProcess p;
      p.setProcessEnvironment(env);
      p.start(GPULAB_CLI_PATH, {"devices"});
      if (!p.waitForFinished(60000)) qFatal("gpulab-cli devices did not finish");
      return QString::fromUtf8(p.readAllStandardOutput());
    };
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("OPENBLAS_CORETYPE");
    env.remove("GPULAB_BLAS_CORE_WAS");
    // OpenBLAS's own choice for this CPU, as the program sees it without help.
    const QString own = devices(env);
    QVERIFY2(own.contains("matrix products: OpenBLAS"), qPrintable(own));
    // The bad case, played here: a program whose OpenBLAS took the generic kernels (as Debian 12's gives a
    // CPU newer than its table; GPULAB_BLAS_PRETEND_CORE pretends that first choice, nothing else) runs
    // itself again on the better ones, and says so.
    env.insert("GPULAB_BLAS_PRETEND_CORE", "Prescott");
    const QString fixed = devices(env);
    QVERIFY2(fixed.contains(QString::fromStdString("kernels: " + better + " (chosen by GPU Lab: OpenBLAS took Prescott")),
             qPrintable(fixed));
    // Set by the learner, the variable is left alone.
    env.remove("GPULAB_BLAS_PRETEND_CORE");
    env.insert("OPENBLAS_CORETYPE", "Prescott");
    const QString theirs = devices(env);
    QVERIFY2(theirs.contains("kernels: Prescott (OPENBLAS_CORETYPE is set)"), qPrintable(theirs));
  }
};

QTEST_GUILESS_MAIN(TestBlasKernels)
#include "test_blas_kernels.moc"
