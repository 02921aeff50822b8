// nn modules and optimizers: structure, printing, train/eval, state dicts on disk, and every
// optimizer's update against its formula computed here in double precision.
#include <QRegularExpression>
#include <QTemporaryDir>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/core/errors.h"
#include "engine/nn/layers.h"
#include "engine/nn/state_dict.h"
#include "engine/optim/optimizer.h"
#include "test_util.h"

using namespace gpulab;

namespace {
std::shared_ptr<nn::Sequential> mlp(Generator& gen) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(16, 64, true, gen), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 1, true, gen)});
}
}  // namespace

class TestNnOptim : public QObject {
  Q_OBJECT

 private slots:
  void sequentialStructureAndPrinting() {
    Generator gen(0);
    auto model = mlp(gen);
    QCOMPARE(model->parameter_count(), 16 * 64 + 64 + 64 + 1);
    QStringList names;
    for (auto& [n, p] : model->named_parameters()) names << QString::fromStdString(n);
    QCOMPARE(names, (QStringList{"0.weight", "0.bias", "2.weight", "2.bias"}));
    QCOMPARE(QString::fromStdString(model->repr()),
             QString("Sequential(\n  (0): Linear(in_features=16, out_features=64, bias=True)\n  (1): ReLU()\n"
                     "  (2): Linear(in_features=64, out_features=1, bias=True)\n)"));
    QCOMPARE((*model)(randn({5, 16}, gen)).sizes(), (Shape{5, 1}));
  }

  void linearInitialisationIsPyTorchs() {
    Generator gen(0);
    nn::Linear layer(100, 50, true, gen);
    const double bound = 1.0 / std::sqrt(100.0);
    QVERIFY(layer.weight.abs().max().item() <= bound);
    QVERIFY(layer.weight.abs().max().item() > 0.9 * bound);
    QVERIFY(layer.bias.abs().max().item() <= bound);
    QVERIFY(layer.weight.requires_grad());
    QVERIFY_THROWS_EXCEPTION(ValueError, nn::Linear(0, 3));
  }

  void trainAndEvalPropagateAndControlDropout() {
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::Dropout>(0.5)});
    Tensor x = ones({1000});
    model->eval();
    QVERIFY(!model->named_children()[0].second->is_training());
    QCOMPARE((*model)(x).sum().item(), 1000.0);
    model->train();
    Tensor y = (*model)(x);
    const auto v = y.toVector<float>();
    const auto zerosCount = std::count(v.begin(), v.end(), 0.0f);
    QVERIFY(zerosCount > 400 && zerosCount < 600);
    QVERIFY(std::all_of(v.begin(), v.end(), [](float f) { return f == 0.0f || f == 2.0f; }));
  }

  void stateDictRoundTripsThroughAFile() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("model.gpulab").toStdString();
    Generator g1(1), g2(2);
    auto a = mlp(g1), b = mlp(g2);
    Tensor x = randn({4, 16}, g1);
    QVERIFY(test::closeness((*a)(x), (*b)(x), 1e-6, 1e-6) > 1.0);
    nn::save(a->state_dict(), path);
    QVERIFY(!QFile::exists(QString::fromStdString(path + ".tmp")));
    b->load_state_dict(nn::load(path));
    GPULAB_COMPARE_TENSORS((*b)(x), (*a)(x), 0, 0);
  }

  void loadStateDictReportsProblemsAndChangesNothing() {
    Generator g1(1), g2(2);
    auto a = mlp(g1);
    nn::Sequential wider{std::make_shared<nn::Linear>(16, 32, true, g2), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 1, true, g2)};
    const auto before = wider.named_parameters()[0].second.toVector<float>();
    try {
      wider.load_state_dict(a->state_dict());
      QFAIL("expected a size mismatch");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("size mismatch for 0.weight: copying a param with shape [64, 16] from checkpoint, "
                                          "the shape in current model is [32, 16].") != std::string::npos, e.what());
    }
    QCOMPARE(wider.named_parameters()[0].second.toVector<float>(), before);
    nn::StateDict partial = a->state_dict();
    partial.pop_back();
    partial.emplace_back("3.weight", zeros({1}));
    try {
      a->load_state_dict(partial);
      QFAIL("expected missing and unexpected keys");
    } catch (const Error& e) {
      QVERIFY(std::string(e.what()).find("Missing key(s) in state_dict: \"2.bias\".") != std::string::npos);
      QVERIFY(std::string(e.what()).find("Unexpected key(s) in state_dict: \"3.weight\".") != std::string::npos);
    }
  }

  void corruptFilesGiveClearErrors() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("bad.gpulab").toStdString();
    { std::ofstream(path) << "not a state dict"; }
    QVERIFY_THROWS_EXCEPTION(IOError, nn::load(path));
    Generator g(1);
    nn::save(mlp(g)->state_dict(), path);
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
    try {
      nn::load(path);
      QFAIL("expected truncation to be detected");
    } catch (const IOError& e) {
      QVERIFY2(std::string(e.what()).find("truncated") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(IOError, nn::load(dir.filePath("missing").toStdString()));
  }

  void sgdWithMomentumFollowsItsFormula() {
    Tensor p = tensor({1.0f, -2.0f}, {2}, {.requires_grad = true});
    optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    double ref[2] = {1.0, -2.0}, buf[2] = {0, 0};
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      (p * p).sum().backward();  // grad = 2p
      opt.step();
      for (int i = 0; i < 2; ++i) {
        const double g = 2 * ref[i] + 0.01 * ref[i];
        buf[i] = step == 0 ? g : 0.9 * buf[i] + g;
        ref[i] -= 0.1 * buf[i];
      }
    }
    const auto v = p.toVector<double>();
    for (int i = 0; i < 2; ++i) QVERIFY2(std::abs(v[static_cast<std::size_t>(i)] - ref[i]) < 1e-5, qPrintable(QString::number(v[static_cast<std::size_t>(i)])));
  }

  void adamAndAdamWFollowTheirFormulas_data() {
    QTest::addColumn<bool>("decoupled");
    QTest::newRow("adam") << false;
    QTest::newRow("adamw") << true;
  }

  void adamAndAdamWFollowTheirFormulas() {
    QFETCH(bool, decoupled);
    Tensor p = tensor({0.5f, -1.5f, 3.0f}, {3}, {.requires_grad = true});
    const optim::AdamOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    std::unique_ptr<optim::Optimizer> opt = decoupled ? std::unique_ptr<optim::Optimizer>(std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, o))
                                                      : std::make_unique<optim::Adam>(std::vector<Tensor>{p}, o);
    double ref[3] = {0.5, -1.5, 3.0}, m[3] = {}, v[3] = {};
    for (int t = 1; t <= 4; ++t) {
      opt->zero_grad();
      (p * p * p).sum().backward();  // grad = 3p^2
      opt->step();
      for (int i = 0; i < 3; ++i) {
        double g = 3 * ref[i] * ref[i];
        if (decoupled) ref[i] *= 1 - 0.01 * 0.1;
        else g += 0.1 * ref[i];
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        const double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.999, t));
        ref[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
      }
    }
    const auto got = p.toVector<double>();
    for (int i = 0; i < 3; ++i) QVERIFY2(std::abs(got[static_cast<std::size_t>(i)] - ref[i]) < 1e-5, qPrintable(QString("%1 vs %2").arg(got[static_cast<std::size_t>(i)]).arg(ref[i])));
  }

  void optimizerValidatesItsArguments() {
    Tensor p = zeros({2}, {.requires_grad = true});
    QVERIFY_THROWS_EXCEPTION(ValueError, optim::SGD({p}, {.lr = -1}));
    QVERIFY_THROWS_EXCEPTION(ValueError, optim::Adam({p}, {.beta1 = 1.5}));
    QVERIFY_THROWS_EXCEPTION(ValueError, optim::SGD({}, {}));
    QVERIFY_THROWS_EXCEPTION(ValueError, optim::SGD({p * 2.0}, {}));
  }

  void zeroGradSetsToNoneOrZero() {
    Tensor p = ones({2}, {.requires_grad = true});
    optim::SGD opt({p}, {.lr = 0.1});
    (p * 2.0).sum().backward();
    opt.zero_grad(false);
    QCOMPARE(p.grad().sum().item(), 0.0);
    opt.zero_grad();
    QVERIFY(!p.grad().defined());
  }

  // --- State-dict files: format v2 (CRC-32C), issue 8 ---------------------------------------------

  void crc32cMatchesTheCastagnoliCheckValue() {
    const std::string check = "123456789";
    QCOMPARE(nn::crc32c(check.data(), check.size()), 0xE3069283u);
    QCOMPARE(nn::crc32c(check.data() + 4, 5, nn::crc32c(check.data(), 4)), 0xE3069283u);  // chained
    QCOMPARE(nn::crc32c(nullptr, 0), 0u);
  }

  // Every single-byte corruption (one flipped bit, and all eight bits inverted) of a small saved
  // file, every truncation and trailing garbage must fail with an IOError naming the file, and the
  // model that would have received the dict keeps its parameters.
  void everyCorruptionOfASavedFileFailsAndChangesNothing() {
    QTemporaryDir dir;
    const std::string good = dir.filePath("small.gpulab").toStdString();
    const std::string bad = dir.filePath("damaged.gpulab").toStdString();
    Generator g1(1), g2(2);
    nn::Linear saved(3, 2, true, g1), target(3, 2, true, g2);
    nn::save(saved.state_dict(), good);
    std::string bytes;
    {
      std::ifstream is(good, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(is), std::istreambuf_iterator<char>());
    }
    QVERIFY(bytes.size() > 40);
    std::vector<std::vector<float>> before;
    for (auto& [n, p] : target.named_parameters()) before.push_back(p.toVector<float>());
    auto unchanged = [&] {
      std::size_t i = 0;
      for (auto& [n, p] : target.named_parameters())
        if (p.toVector<float>() != before[i++]) return false;
      return true;
    };
    auto expectFailure = [&](const std::string& damaged, const QByteArray& what) {
      { std::ofstream(bad, std::ios::binary | std::ios::trunc).write(damaged.data(), static_cast<std::streamsize>(damaged.size())); }
      try {
        target.load_state_dict(nn::load(bad));
        QFAIL(("loaded silently: " + what).constData());
      } catch (const IOError& e) {
        const std::string msg = e.what();
        QVERIFY2(msg.find(bad) != std::string::npos, (what + ": " + msg.c_str()).constData());
        QVERIFY2(msg.find("is corrupt") != std::string::npos || msg.find("format version") != std::string::npos ||
                     msg.find("truncated") != std::string::npos || msg.find("bad magic") != std::string::npos,
                 (what + ": " + msg.c_str()).constData());
      }
      QVERIFY2(unchanged(), ("parameters changed: " + what).constData());
    };
    for (std::size_t at = 0; at < bytes.size(); ++at) {
      for (unsigned char mask : {static_cast<unsigned char>(1u << (at % 8)), static_cast<unsigned char>(0xFF)}) {
        std::string damaged = bytes;
        damaged[at] = static_cast<char>(damaged[at] ^ mask);
        expectFailure(damaged, QByteArray("byte ") + QByteArray::number(qulonglong(at)) + " ^ " + QByteArray::number(mask));
        if (QTest::currentTestFailed()) return;
      }
    }
    for (std::size_t len = 0; len < bytes.size(); ++len) {
      expectFailure(bytes.substr(0, len), "truncated to " + QByteArray::number(qulonglong(len)));
      if (QTest::currentTestFailed()) return;
    }
    for (const std::string& tail : {std::string(1, '\0'), std::string("garbage"), bytes}) {
      expectFailure(bytes + tail, "trailing " + QByteArray::number(qulonglong(tail.size())) + " bytes");
      if (QTest::currentTestFailed()) return;
    }
    // The undamaged file still loads.
    target.load_state_dict(nn::load(good));
    QCOMPARE(target.named_parameters()[0].second.toVector<float>(), saved.named_parameters()[0].second.toVector<float>());
  }

  void corruptPayloadNamesTheChecksums() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("flipped.gpulab").toStdString();
    Generator g(1);
    nn::Linear model(3, 2, true, g);
    std::string bytes = nn::serializeStateDict(model.state_dict());
    bytes[bytes.size() - 10] ^= 0x04;  // inside the bias values
    { std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size())); }
    try {
      nn::load(path);
      QFAIL("a flipped payload bit loaded silently");
    } catch (const IOError& e) {
      const QString msg = e.what();
      QVERIFY2(msg.contains(QRegularExpression("^'.*flipped\\.gpulab' is corrupt: checksum mismatch \\(expected 0x[0-9a-f]{8}, found 0x[0-9a-f]{8}\\)$")),
               e.what());
    }
  }

  // Files written before issue 8 (format v1: no body length, no checksum) still load.
  void formatVersion1FilesStillLoad() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("v1.gpulab").toStdString();
    std::string v1 = std::string("GPULABSD", 8);
    auto put32 = [&](std::uint32_t v) { v1.append(reinterpret_cast<const char*>(&v), 4); };
    auto put64 = [&](std::int64_t v) { v1.append(reinterpret_cast<const char*>(&v), 8); };
    put32(1);  // version
    put32(1);  // entries
    put32(6);
    v1 += "weight";
    v1 += static_cast<char>(DType::Float32);
    put32(2);
    put64(1);
    put64(3);
    for (float f : {1.5f, -2.0f, 0.25f}) v1.append(reinterpret_cast<const char*>(&f), 4);
    { std::ofstream(path, std::ios::binary).write(v1.data(), static_cast<std::streamsize>(v1.size())); }
    const nn::StateDict sd = nn::load(path);
    QCOMPARE(sd.size(), std::size_t{1});
    QCOMPARE(sd[0].first, std::string("weight"));
    QCOMPARE(sd[0].second.sizes(), (Shape{1, 3}));
    QCOMPARE(sd[0].second.toVector<float>(), (std::vector<float>{1.5f, -2.0f, 0.25f}));
    // v1 has no checksum, but trailing bytes are still refused.
    { std::ofstream(path, std::ios::binary | std::ios::app) << "x"; }
    QVERIFY_THROWS_EXCEPTION(IOError, nn::load(path));
  }

  void saveWritesVersion2() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("v2.gpulab").toStdString();
    Generator g(1);
    nn::save(mlp(g)->state_dict(), path);
    std::ifstream is(path, std::ios::binary);
    char header[12];
    QVERIFY(is.read(header, sizeof header));
    std::uint32_t version = 0;
    std::memcpy(&version, header + 8, 4);
    QCOMPARE(version, 2u);
  }

  // Found by fuzz_state_dict: a dict with an empty bfloat16 entry of shape [2, 0, 3] loaded but could
  // not be saved again ("copy is not implemented for dtype bfloat16").
  void emptyEntriesOfEveryDtypeRoundTrip() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("empty.gpulab").toStdString();
    nn::StateDict sd;
    for (DType dt : {kFloat32, kInt64, kFloat16, kBFloat16}) sd.emplace_back("e" + std::to_string(int(dt)), Tensor::empty({2, 0, 3}, dt));
    nn::save(sd, path);
    const nn::StateDict back = nn::load(path);
    QCOMPARE(back.size(), sd.size());
    for (std::size_t i = 0; i < sd.size(); ++i) {
      QCOMPARE(back[i].first, sd[i].first);
      QCOMPARE(back[i].second.sizes(), (Shape{2, 0, 3}));
      QCOMPARE(back[i].second.dtype(), sd[i].second.dtype());
    }
  }

  // save() refuses what load() would refuse, instead of writing a file that cannot be read back.
  void saveRefusesNamesLoadWouldRefuse() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("long.gpulab").toStdString();
    nn::StateDict sd;
    sd.emplace_back(std::string(5000, 'w'), zeros({1}));
    QVERIFY_THROWS_EXCEPTION(IOError, nn::save(sd, path));
    QVERIFY(!QFile::exists(QString::fromStdString(path)));
  }
};

QTEST_GUILESS_MAIN(TestNnOptim)
#include "test_nn_optim.moc"
