// Data sets and the DataLoader: seeded determinism, complete epochs, workers, drop_last, and the
// Fashion-MNIST reader's handling of real and broken files.
#include <QTemporaryDir>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <thread>

#include "engine/runtime/emulated_gpu.h"
#include "engine/core/errors.h"
#include "engine/core/parallel.h"
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
// Files for a data set of `n` images of 2x2 pixels, as the IDX format lays them out.
std::vector<unsigned char> idxImages(unsigned char n) {
  std::vector<unsigned char> b{0, 0, 8, 3, 0, 0, 0, n, 0, 0, 0, 2, 0, 0, 0, 2};
  for (int i = 0; i < 4 * n; ++i) b.push_back(static_cast<unsigned char>(i));
  return b;
}
std::vector<unsigned char> idxLabels(unsigned char n) {
  std::vector<unsigned char> b{0, 0, 8, 1, 0, 0, 0, n};
  for (int i = 0; i < n; ++i) b.push_back(static_cast<unsigned char>(i % 10));
  return b;
}
// A gzip member holding `payload` in one stored (uncompressed) deflate block, cut after `keep`
// bytes of the payload: gzip's header, then the block header, then the bytes (no trailer, so it is
// always truncated unless the trailer were added -- which the tests never need).
std::vector<unsigned char> truncatedGzip(const std::vector<unsigned char>& payload, std::size_t keep) {
  std::vector<unsigned char> b{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  const auto len = static_cast<std::uint16_t>(payload.size());
  b.insert(b.end(), {1, static_cast<unsigned char>(len & 0xff), static_cast<unsigned char>(len >> 8),
                     static_cast<unsigned char>(~len & 0xff), static_cast<unsigned char>((~len >> 8) & 0xff)});
  b.insert(b.end(), payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(keep));
  return b;
}
void writeFile(const QTemporaryDir& dir, const char* name, const std::vector<unsigned char>& bytes) {
  std::ofstream(dir.filePath(name).toStdString(), std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
// What loading the test set from `dir` throws (IOError's text), or "loaded" / "other exception";
// a load that has not returned after 5 s is a hang.
std::string loadError(const QTemporaryDir& dir, bool train = false) {
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      loadFashionMnist(train, dir.path().toStdString());
      return "loaded";
    } catch (const IOError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("other exception: ") + e.what();
    }
  });
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Unblock a reader stuck opening a FIFO (a writer arrives and leaves) so the test can end.
    for (const char* name : {"t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte", "t10k-labels-idx1-ubyte.gz"}) {
      const int fd = ::open(dir.filePath(name).toLocal8Bit().constData(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    result.wait();
    return "hang";
  }
  return result.get();
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

  // A batch of wide examples is gathered over the threads (past 64 KB): every row still holds its
  // own example, beside its own target, on one thread or two.
  void wideBatchesStayPairedOnEveryThreadCount() {
    const std::int64_t n = 300, features = 1000;
    Tensor inputs = arange(static_cast<double>(n * features)).view({n, features});  // row i: i*1000 + f
    auto ds = std::make_shared<TensorDataset>(inputs, arange(static_cast<double>(n)).to(kInt64));
    const int threads = numThreads();
    for (int t : {1, 2}) {
      setNumThreads(t);
      DataLoader loader(ds, {.batch_size = 128, .shuffle = true, .seed = 3});
      std::int64_t rows = 0;
      for (const Batch& b : loader) {
        const auto in = b.inputs.toVector<float>();
        const auto tg = b.targets.toVector<std::int64_t>();
        for (std::size_t r = 0; r < tg.size(); ++r) {
          for (std::int64_t f : {std::int64_t{0}, features / 2, features - 1}) {
            QCOMPARE(in[r * static_cast<std::size_t>(features) + static_cast<std::size_t>(f)], static_cast<float>(tg[r] * features + f));
          }
        }
        rows += static_cast<std::int64_t>(tg.size());
      }
      QCOMPARE(rows, n);
    }
    setNumThreads(threads);
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
    // A real GPU, or the emulated one (whose copies from pinned memory may be asynchronous too).
    DataLoader loader(numbered(10), {.batch_size = 4, .pin_memory = true});
    const bool gpu = test::cudaUsable() || cuda::emulatedDevice().has_value();
    QCOMPARE(loader.pinsMemory(), gpu);
    QCOMPARE((*loader.begin()).inputs.is_pinned(), gpu);
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

  // Issue 8, defect 2: whatever stands where a data file should be, the reader ends with an IOError
  // that names the file -- no use of zlib's freed message, no hang, no unbounded read.
  void brokenDataFilesAreRejectedByName_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("expected");  // part of the message after the file's name
    QTest::newRow("truncated gzip") << "truncated" << "is corrupt: unexpected end of file";
    QTest::newRow("corrupt gzip") << "corrupt" << "is corrupt: invalid";
    QTest::newRow("gzip of a short file") << "short" << "has 18 bytes, expected 24";
    QTest::newRow("directory") << "directory" << "is not a regular file";
    QTest::newRow("fifo") << "fifo" << "is not a regular file";
    QTest::newRow("symlink to /dev/zero") << "devzero" << "is not a regular file";
    QTest::newRow("header larger than any data set") << "huge" << "is too large";
    QTest::newRow("longer than its header") << "long" << "expected 24";
  }
  void brokenDataFilesAreRejectedByName() {
    QFETCH(QString, kind);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    writeFile(dir, "t10k-labels-idx1-ubyte", idxLabels(2));
    const std::string images = dir.filePath("t10k-images-idx3-ubyte.gz").toStdString();
    if (kind == "truncated") {
      writeFile(dir, "t10k-images-idx3-ubyte.gz", truncatedGzip(idxImages(2), 20));
    } else if (kind == "corrupt") {
      writeFile(dir, "t10k-images-idx3-ubyte.gz", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
    } else if (kind == "short") {
      // A well-formed gzip stream (stored block plus CRC-32 and size trailer) of 18 of the 24 bytes.
      std::vector<unsigned char> part = idxImages(2);
      part.resize(18);
      writeFile(dir, "t10k-images-idx3-ubyte", part);
      QVERIFY(std::system(("gzip -n -q " + dir.filePath("t10k-images-idx3-ubyte").toStdString()).c_str()) == 0);
    } else if (kind == "directory") {
      QVERIFY(std::filesystem::create_directory(images));
    } else if (kind == "fifo") {
      QCOMPARE(::mkfifo(images.c_str(), 0600), 0);
    } else if (kind == "devzero") {
      std::filesystem::create_symlink("/dev/zero", images);
    } else if (kind == "huge") {
      // 2^31 images of 2^15 x 2^15 pixels, announced by a header of 16 bytes.
      writeFile(dir, "t10k-images-idx3-ubyte", {0, 0, 8, 3, 0x80, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0x80, 0});
    } else if (kind == "long") {
      auto bytes = idxImages(2);
      bytes.resize(bytes.size() + (1 << 20));
      writeFile(dir, "t10k-images-idx3-ubyte", bytes);
    }
    const std::string message = loadError(dir);
    QVERIFY2(message.find("t10k-images-idx3-ubyte") != std::string::npos, message.c_str());
    QVERIFY2(message.find(expected.toStdString()) != std::string::npos, message.c_str());
    // The engine reads the next, good files normally.
    std::filesystem::remove_all(images);
    std::filesystem::remove_all(dir.filePath("t10k-images-idx3-ubyte").toStdString());
    writeFile(dir, "t10k-images-idx3-ubyte", idxImages(2));
    QCOMPARE(loadError(dir), std::string("loaded"));
  }

  // An empty data set is refused when it is read (it once printed NaN, or trained for 0 steps).
  void emptyDataSetsAreRefused_data() {
    QTest::addColumn<bool>("train");
    QTest::newRow("test set") << false;
    QTest::newRow("training set") << true;
  }
  void emptyDataSetsAreRefused() {
    QFETCH(bool, train);
    QTemporaryDir dir;
    const std::string prefix = train ? "train" : "t10k";
    writeFile(dir, (prefix + "-images-idx3-ubyte").c_str(), idxImages(0));
    writeFile(dir, (prefix + "-labels-idx1-ubyte").c_str(), idxLabels(0));
    const std::string message = loadError(dir, train);
    QVERIFY2(message.find(prefix + "-images-idx3-ubyte' holds no images") != std::string::npos, message.c_str());
  }
};

QTEST_GUILESS_MAIN(TestData)
#include "test_data.moc"
