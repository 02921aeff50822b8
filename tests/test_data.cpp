// Data sets and the DataLoader: seeded determinism, complete epochs, workers, drop_last, and the
// Fashion-MNIST reader's handling of real and broken files.
#include <QTemporaryDir>
#include <fstream>
#include <set>

#include "engine/core/errors.h"
#include "engine/data/dataloader.h"
#include "test_util.h"

using namespace gpulab;
using namespace gpulab::data;

namespace {
std::shared_ptr<TensorDataset> numbered(std::int64_t n) {
  // Example i has input [i, -i] and target i, so batches show which examples they hold.
  Tensor index = arange(static_cast<double>(n));
  return std::make_shared<TensorDataset>(index.unsqueeze(1) * tensor({1, -1}, {2}), index.to(kInt64));
}
std::vector<std::int64_t> epochTargets(DataLoader& loader) {
  std::vector<std::int64_t> seen;
  for (const Batch& b : loader) {
    for (auto t : b.targets.toVector<std::int64_t>()) seen.push_back(t);
  }
  return seen;
}
}  // namespace

class TestData : public QObject {
  Q_OBJECT

 private slots:
  void sameSeedSameOrderDifferentSeedOrEpochDifferentOrder() {
    auto ds = numbered(100);
    DataLoader a(ds, {.batch_size = 8, .shuffle = true, .seed = 5}), b(ds, {.batch_size = 8, .shuffle = true, .seed = 5});
    DataLoader c(ds, {.batch_size = 8, .shuffle = true, .seed = 6});
    const auto ea = epochTargets(a), eb = epochTargets(b), ec = epochTargets(c);
    QCOMPARE(ea, eb);
    QVERIFY(ea != ec);
    QVERIFY(epochTargets(a) != ea);  // the next epoch reshuffles
    std::vector<std::int64_t> sorted = ea;
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t i = 0; i < 100; ++i) QCOMPARE(sorted[static_cast<std::size_t>(i)], i);  // a permutation
  }

  void inputsAndTargetsStayPaired() {
    DataLoader loader(numbered(50), {.batch_size = 7, .shuffle = true, .seed = 1});
    for (const Batch& b : loader) {
      const auto in = b.inputs.toVector<float>();
      const auto tg = b.targets.toVector<std::int64_t>();
      for (std::size_t r = 0; r < tg.size(); ++r) {
        QCOMPARE(in[2 * r], static_cast<float>(tg[r]));
        QCOMPARE(in[2 * r + 1], -static_cast<float>(tg[r]));
      }
    }
  }

  void batchCountsAndDropLast() {
    auto ds = numbered(100);
    DataLoader keep(ds, {.batch_size = 32}), drop(ds, {.batch_size = 32, .drop_last = true});
    QCOMPARE(keep.size(), 4);
    QCOMPARE(drop.size(), 3);
    std::vector<std::int64_t> sizes;
    for (const Batch& b : keep) sizes.push_back(b.inputs.size(0));
    QCOMPARE(sizes, (std::vector<std::int64_t>{32, 32, 32, 4}));
    QCOMPARE(static_cast<std::int64_t>(epochTargets(drop).size()), 96);
    QVERIFY_THROWS_EXCEPTION(ValueError, DataLoader(ds, {.batch_size = 0}));
    QVERIFY_THROWS_EXCEPTION(ValueError, DataLoader(ds, {.num_workers = -1}));
  }

  void workersDeliverTheSameBatchesInOrder_data() {
    QTest::addColumn<int>("workers");
    QTest::newRow("1 worker") << 1;
    QTest::newRow("3 workers") << 3;
  }

  void workersDeliverTheSameBatchesInOrder() {
    QFETCH(int, workers);
    auto ds = numbered(1000);
    DataLoader serial(ds, {.batch_size = 16, .shuffle = true, .seed = 9});
    DataLoader parallel(ds, {.batch_size = 16, .shuffle = true, .num_workers = workers, .seed = 9});
    QCOMPARE(epochTargets(parallel), epochTargets(serial));
    // Abandoning an epoch midway shuts the workers down cleanly.
    for (const Batch& b : parallel) {
      if (b.index == 3) break;
    }
  }

  void pinMemoryNeedsAGpu() {
    DataLoader loader(numbered(10), {.batch_size = 4, .pin_memory = true});
    QCOMPARE(loader.pinsMemory(), test::cudaUsable());
    QCOMPARE((*loader.begin()).inputs.is_pinned(), test::cudaUsable());
  }

  void regressionDataIsSeededAndLearnable() {
    auto a = makeRegressionDataset(256, 16, 0.1, 3), b = makeRegressionDataset(256, 16, 0.1, 3), c = makeRegressionDataset(256, 16, 0.1, 4);
    QCOMPARE(a->inputs().toVector<float>(), b->inputs().toVector<float>());
    QVERIFY(a->inputs().toVector<float>() != c->inputs().toVector<float>());
    QCOMPARE(a->inputShape(), (Shape{16}));
    QCOMPARE(a->targetShape(), (Shape{1}));
    // The targets depend on the inputs: their variance is well above the noise's (0.1^2).
    Tensor y = a->targets();
    const double var = ((y - y.mean()) * (y - y.mean())).mean().item();
    QVERIFY2(var > 0.5, qPrintable(QString::number(var)));
    QCOMPARE(a->get(3).input.sizes(), (Shape{16}));
    QVERIFY_THROWS_EXCEPTION(IndexError, a->get(256));
  }

  void fashionMnistLoadsWhenInstalled() {
    if (!QFile::exists(QString::fromStdString(fashionMnistDirectory() + "/t10k-labels-idx1-ubyte.gz")) &&
        !QFile::exists(QString::fromStdString(fashionMnistDirectory() + "/t10k-labels-idx1-ubyte"))) {
      QSKIP("dataset-fashion-mnist is not installed");
    }
    auto test = loadFashionMnist(false);
    QCOMPARE(test->size(), 10000);
    QCOMPARE(test->inputShape(), (Shape{1, 28, 28}));
    QCOMPARE(test->targetDType(), kInt64);
    std::set<std::int64_t> classes;
    for (auto v : test->targets().toVector<std::int64_t>()) classes.insert(v);
    QCOMPARE(classes.size(), std::size_t{10});
    QVERIFY(std::abs(test->inputs().mean().item()) < 0.1);  // normalised
  }

  void missingFashionMnistNamesThePackage() {
    QTemporaryDir empty;
    try {
      loadFashionMnist(true, empty.path().toStdString());
      QFAIL("expected IOError");
    } catch (const IOError& e) {
      QVERIFY2(std::string(e.what()).find("apt-get install dataset-fashion-mnist") != std::string::npos, e.what());
    }
  }

  void corruptIdxFilesAreRejected() {
    QTemporaryDir dir;
    auto write = [&](const char* name, std::vector<unsigned char> bytes) {
      std::ofstream(dir.filePath(name).toStdString(), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    };
    // 2 images of 2x2 but only 7 pixel bytes; labels fine.
    write("t10k-images-idx3-ubyte", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7});
    write("t10k-labels-idx1-ubyte", {0, 0, 8, 1, 0, 0, 0, 2, 1, 2});
    try {
      loadFashionMnist(false, dir.path().toStdString());
      QFAIL("expected IOError");
    } catch (const IOError& e) {
      QVERIFY2(std::string(e.what()).find("t10k-images-idx3-ubyte' has 23 bytes, expected 24") != std::string::npos, e.what());
    }
    write("t10k-images-idx3-ubyte", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8});
    write("t10k-labels-idx1-ubyte", {0, 0, 8, 1, 0, 0, 0, 2, 1, 12});
    QVERIFY_THROWS_EXCEPTION(IOError, loadFashionMnist(false, dir.path().toStdString()));
    write("t10k-labels-idx1-ubyte", {0, 0, 8, 1, 0, 0, 0, 2, 1, 9});
    QCOMPARE(loadFashionMnist(false, dir.path().toStdString())->size(), 2);
  }
};

QTEST_GUILESS_MAIN(TestData)
#include "test_data.moc"
