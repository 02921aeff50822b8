// float16 / bfloat16 (and float64) CPU results against PyTorch's, bit pattern by bit pattern: one row
// per case of tests/dtype_parity/cases.json, which tests/dtype_parity/make_cases.py generated with
// Debian's torch 1.13 (/usr/bin/python3 tests/dtype_parity/make_cases.py regenerates it).
//
// Inputs are exact bit patterns; each 16-bit input is built as the float32 tensor of its exact value
// (every float16/bfloat16 value is a float32) and then .to(dtype); the "to"/"to_float32" rows check the
// conversions themselves. Each output element must have PyTorch's bit pattern, or be within the
// case's tol_ulps of it, counted along the ordered bit patterns of the output dtype. NaN must be NaN
// (any payload), an infinity must be the same infinity, and at tolerance 0 the sign of a zero counts.
//
// Why the tolerances are what they are (the full argument is at the top of make_cases.py):
//   0 ulps  conversions, + - * /, neg, abs, relu, maximum, max, pow 2, add/mul by 2.5: one correctly
//           rounded float32 operation on exact inputs, then one rounding to the dtype (float32 has
//           at least 2p+2 bits for either 16-bit type, so that double rounding is innocuous): PyTorch
//           and the engine must agree bit for bit, sign of zero included.
//   1 ulp   exp, log, sqrt, tanh, sigmoid, gelu, gelu tanh, pow 3, softmax, log_softmax: glibc's
//           float32 functions and PyTorch's SLEEF/polynomials differ by a float32 ulp or two, which
//           flips the 16-bit rounding when the exact value is near a midpoint.
//   1 ulp   sum, mean, matmul, mse_loss, cross_entropy: float32 accumulation in another order.
//   float64 0 for exact ops and for sums of grid values (exact in any order), 3 for other sums, 2 for
//           transcendental functions (glibc and SLEEF u10 are each within 1 ulp), 4 for softmax,
//           log_softmax and the losses.
//   tol_ulps_elem  gelu, gelu tanh, log_softmax, cross_entropy: where the final cancellation
//           (1 + erf(..), 1 + tanh(..), (x - max) - log(sum)) bounds the float32 (float64) error above
//           one ulp of the result, that element gets the bound, in ulps, on top of the case's
//           tolerance; the bound is computed from the inputs by the generator, never from the engine.
// "alternatives": where PyTorch 1.13's own CPU result is not the correctly rounded one (its bfloat16
// gemm accumulates in bfloat16; its bfloat16 gelu tanh and log_softmax round intermediates to
// bfloat16; its float16 mean rounds the sum before dividing, ...), the case also carries PyTorch's
// float32 op rounded once and/or the exact result rounded once, and an element within the tolerance
// of one of those passes too; the test prints how many elements passed that way. No tolerance is
// widened to cover either side.
//
// Where PyTorch 1.13 has no CPU kernel for the dtype (the case has torch_error), the expected values
// are PyTorch's float32 op rounded once to the dtype (mse_loss: PyTorch's kernel written with the
// dtype's own ops); an engine that also raises NotImplementedError there skips the row, saying so.
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

#include "engine/core/errors.h"
#include "engine/core/half.h"
#include "test_util.h"

#ifndef GPULAB_DTYPE_CASES
#error "GPULAB_DTYPE_CASES (the path of tests/dtype_parity/cases.json) must be defined"
#endif

using namespace gpulab;

namespace {

// One element type's bit layout: width, and the magnitude pattern of +inf (NaN: any larger magnitude).
struct Format {
  int bits = 0;
  std::uint64_t inf = 0;
  DType dtype = kFloat32;
};

std::optional<Format> formatOf(const QString& name) {
  if (name == "float16") return Format{16, 0x7C00u, kFloat16};
  if (name == "bfloat16") return Format{16, 0x7F80u, kBFloat16};
  if (name == "float32") return Format{32, 0x7F800000u, kFloat32};
  if (name == "float64") return Format{64, 0x7FF0000000000000ull, kFloat64};
  return std::nullopt;
}

std::uint64_t signBit(const Format& f) { return std::uint64_t{1} << (f.bits - 1); }
std::uint64_t magnitude(const Format& f, std::uint64_t b) { return b & (signBit(f) - 1); }
bool isNan(const Format& f, std::uint64_t b) { return magnitude(f, b) > f.inf; }
bool isInf(const Format& f, std::uint64_t b) { return magnitude(f, b) == f.inf; }
// Monotonic in the value; +0 and -0 both 0.
std::int64_t ordered(const Format& f, std::uint64_t b) {
  const auto m = static_cast<std::int64_t>(magnitude(f, b));
  return (b & signBit(f)) ? -m : m;
}

double valueOf(const Format& f, std::uint64_t b) {
  switch (f.bits) {
    case 16: return f.dtype == kFloat16 ? halfbits::toFloat16(static_cast<std::uint16_t>(b))
                                        : halfbits::toBFloat16(static_cast<std::uint16_t>(b));
    case 32: return std::bit_cast<float>(static_cast<std::uint32_t>(b));
    default: return std::bit_cast<double>(b);
  }
}

QString describe(const Format& f, std::uint64_t b) {
  const double v = valueOf(f, b);
  const QString text = v == 0 ? QString(std::signbit(v) ? "-0" : "0") : QString::number(v, 'g', f.bits == 64 ? 17 : 9);
  return QString("%1 (0x%2)").arg(text).arg(b, f.bits / 4, 16, QChar('0'));
}

// Whether `got` matches `want` within `tol` ulps (see the top of the file).
bool matches(const Format& f, std::uint64_t got, std::uint64_t want, std::int64_t tol) {
  if (isNan(f, want) || isNan(f, got)) return isNan(f, want) && isNan(f, got);
  if (isInf(f, want) || isInf(f, got)) return got == want;
  if (tol == 0) return got == want;
  const std::int64_t d = ordered(f, got) - ordered(f, want);
  return (d < 0 ? -d : d) <= tol;
}

std::int64_t ulps(const Format& f, std::uint64_t a, std::uint64_t b) {
  if (isNan(f, a) || isNan(f, b) || isInf(f, a) || isInf(f, b)) return a == b ? 0 : -1;  // -1: not comparable
  const std::int64_t d = ordered(f, a) - ordered(f, b);
  return d < 0 ? -d : d;
}

// An encoded array ({"dtype", "shape", "bits16" | "bits32" | "hex64" | "int64"}).
struct Encoded {
  QString dtype;
  Shape shape;
  std::vector<std::uint64_t> bits;     // float formats
  std::vector<std::int64_t> integers;  // int64
};

Encoded decode(const QJsonObject& o) {
  Encoded e;
  e.dtype = o["dtype"].toString();
  for (const auto v : o["shape"].toArray()) e.shape.push_back(v.toInteger());
  if (o.contains("bits16")) {
    for (const auto v : o["bits16"].toArray()) e.bits.push_back(static_cast<std::uint64_t>(v.toInteger()));
  } else if (o.contains("bits32")) {
    for (const auto v : o["bits32"].toArray()) e.bits.push_back(static_cast<std::uint64_t>(v.toInteger()));
  } else if (o.contains("hex64")) {
    for (const auto v : o["hex64"].toArray()) e.bits.push_back(v.toString().toULongLong(nullptr, 16));
  } else if (o.contains("int64")) {
    for (const auto v : o["int64"].toArray()) e.integers.push_back(v.toInteger());
  }
  return e;
}

// The engine tensor of an encoded input: 16-bit values through an exact float32 tensor and .to(dtype).
Tensor makeInput(const Encoded& e) {
  if (e.dtype == "int64") return tensor(e.integers, e.shape);
  const Format f = *formatOf(e.dtype);
  if (f.bits == 64) {
    Tensor t = Tensor::empty(e.shape, kFloat64);
    std::vector<double> v(e.bits.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::bit_cast<double>(e.bits[i]);
    if (!v.empty()) std::memcpy(t.data<double>(), v.data(), v.size() * sizeof(double));
    return t;
  }
  std::vector<float> v(e.bits.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(valueOf(f, e.bits[i]));
  const Tensor t = tensor(v, e.shape);
  return f.dtype == kFloat32 ? t : t.to(f.dtype);
}

// An engine tensor's elements as bit patterns (row-major).
std::vector<std::uint64_t> bitsOf(const Tensor& t) {
  const Tensor h = t.contiguous().cpu();
  std::vector<std::uint64_t> out(static_cast<std::size_t>(h.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (h.dtype()) {
      case DType::Float16: out[i] = h.data<Half>()[i].bits; break;
      case DType::BFloat16: out[i] = h.data<BFloat16>()[i].bits; break;
      case DType::Float32: out[i] = std::bit_cast<std::uint32_t>(h.data<float>()[i]); break;
      case DType::Float64: out[i] = std::bit_cast<std::uint64_t>(h.data<double>()[i]); break;
      default: out[i] = static_cast<std::uint64_t>(h.data<std::int64_t>()[i]); break;
    }
  }
  return out;
}

// The op of a case through the engine's API.
Tensor runOp(const QString& op, const QJsonObject& args, const std::vector<Tensor>& in, DType dtype) {
  auto dimArg = [&] { return static_cast<std::int64_t>(args["dim"].toInteger()); };
  if (op == "to") return in[0].to(dtype);
  if (op == "to_float32") return in[0].to(kFloat32);
  if (op == "add") return add(in[0], in[1]);
  if (op == "sub") return sub(in[0], in[1]);
  if (op == "mul") return mul(in[0], in[1]);
  if (op == "div") return div(in[0], in[1]);
  if (op == "maximum") return maximum(in[0], in[1]);
  if (op == "neg") return neg(in[0]);
  if (op == "abs") return abs(in[0]);
  if (op == "relu") return relu(in[0]);
  if (op == "sigmoid") return sigmoid(in[0]);
  if (op == "tanh") return tanh(in[0]);
  if (op == "exp") return exp(in[0]);
  if (op == "log") return log(in[0]);
  if (op == "sqrt") return sqrt(in[0]);
  if (op == "gelu") return gelu(in[0], args["approximate"].toString().toStdString());
  if (op == "pow") return pow(in[0], args["exponent"].toDouble());
  if (op == "add_scalar") return add(in[0], args["scalar"].toDouble());
  if (op == "mul_scalar") return mul(in[0], args["scalar"].toDouble());
  if (op == "sum") return args.contains("dim") ? sum(in[0], dimArg()) : sum(in[0]);
  if (op == "mean") return args.contains("dim") ? mean(in[0], dimArg()) : mean(in[0]);
  if (op == "max") return max(in[0]);
  if (op == "softmax") return softmax(in[0], dimArg());
  if (op == "log_softmax") return log_softmax(in[0], dimArg());
  if (op == "matmul") return matmul(in[0], in[1]);
  if (op == "mse_loss") return mse_loss(in[0], in[1], args["reduction"].toString().toStdString());
  if (op == "cross_entropy") return cross_entropy(in[0], in[1], args["reduction"].toString().toStdString());
  throw ValueError("test_dtype_parity: unknown op " + op.toStdString());
}

QString shapeText(const Shape& s) { return QString::fromStdString(shapeStr(s)); }

// "[1, 3]": the multi-index of flat element i of `shape`.
QString indexText(const Shape& shape, std::int64_t i) {
  QStringList parts;
  for (auto d = static_cast<std::int64_t>(shape.size()) - 1; d >= 0; --d) {
    parts.prepend(QString::number(i % shape[d]));
    i /= shape[d];
  }
  return "[" + parts.join(", ") + "]";
}

struct Cases {
  QJsonObject header;
  QJsonArray cases;
  QString error;
};

const Cases& loadCases() {
  static const Cases c = [] {
    Cases c;
    QFile file(QStringLiteral(GPULAB_DTYPE_CASES));
    if (!file.open(QIODevice::ReadOnly)) {
      c.error = "cannot open " + file.fileName();
      return c;
    }
    QJsonParseError err;
    const QJsonDocument doc = QJsonDocument::fromJson(file.readAll(), &err);
    if (doc.isNull()) {
      c.error = file.fileName() + ": " + err.errorString();
      return c;
    }
    c.header = doc.object()["header"].toObject();
    c.cases = doc.object()["cases"].toArray();
    return c;
  }();
  return c;
}

}  // namespace

class TestDTypeParity : public QObject {
  Q_OBJECT

 private slots:
  void casesFileIsComplete() {
    const Cases& c = loadCases();
    QVERIFY2(c.error.isEmpty(), qPrintable(c.error));
    QVERIFY(!c.header["torch_version"].toString().isEmpty());
    qInfo("%lld cases, expected values from torch %s (%s)", static_cast<long long>(c.cases.size()),
          qPrintable(c.header["torch_version"].toString()), qPrintable(c.header["command"].toString()));
    // Every op of the table, for both 16-bit dtypes.
    const QStringList ops = {"to", "to_float32", "add", "sub", "mul", "div", "neg", "abs", "relu", "sigmoid",
                             "tanh", "exp", "log", "sqrt", "gelu", "pow", "add_scalar", "mul_scalar", "maximum",
                             "sum", "mean", "max", "softmax", "log_softmax", "matmul", "mse_loss", "cross_entropy"};
    for (const QString dtype : {"float16", "bfloat16"}) {
      for (const QString& op : ops) {
        bool found = false;
        for (const auto v : c.cases) {
          const QJsonObject o = v.toObject();
          found = found || (o["dtype"].toString() == dtype && o["op"].toString() == op);
        }
        QVERIFY2(found, qPrintable(QString("no %1 case for %2").arg(dtype, op)));
      }
    }
  }

  void parity_data() {
    QTest::addColumn<int>("index");
    const Cases& c = loadCases();
    if (!c.error.isEmpty()) QFAIL(qPrintable(c.error));
    for (int i = 0; i < c.cases.size(); ++i) {
      QTest::newRow(qPrintable(c.cases[i].toObject()["name"].toString())) << i;
    }
  }

  void parity() {
    QFETCH(int, index);
    const QJsonObject cs = loadCases().cases[index].toObject();
    const QString name = cs["name"].toString(), op = cs["op"].toString();
    const Format caseFormat = *formatOf(cs["dtype"].toString());
    const Encoded expected = decode(cs["expected"].toObject());
    // Other accepted values (PyTorch's float32 op rounded once; the exact result rounded once), each
    // with its label, where they differ from PyTorch's result.
    std::vector<std::pair<QString, Encoded>> alternatives;
    for (const auto v : cs["alternatives"].toArray()) {
      alternatives.emplace_back(v.toObject()["label"].toString(), decode(v.toObject()));
    }
    const Format outFormat = *formatOf(expected.dtype);
    const std::int64_t caseTol = cs["tol_ulps"].toInteger();
    const QJsonArray elemTol = cs["tol_ulps_elem"].toArray();  // per element where conditioning needs more
    auto tolAt = [&](std::size_t i) { return elemTol.isEmpty() ? caseTol : elemTol[static_cast<int>(i)].toInteger(); };

    std::vector<Encoded> encodedInputs;
    std::vector<Tensor> inputs;
    for (const auto v : cs["inputs"].toArray()) {
      encodedInputs.push_back(decode(v.toObject()));
      inputs.push_back(makeInput(encodedInputs.back()));
    }

    Tensor out;
    try {
      out = runOp(op, cs["args"].toObject(), inputs, caseFormat.dtype);
    } catch (const NotImplementedError& e) {
      if (cs.contains("torch_error")) {
        QSKIP(qPrintable(QString("%1: not implemented in the engine (%2) nor in PyTorch %3 (%4)")
                             .arg(name, e.what(), loadCases().header["torch_version"].toString(),
                                  cs["torch_error"].toString())));
      }
      QFAIL(qPrintable(QString("%1: the engine raised NotImplementedError: %2 (PyTorch computes it)").arg(name, e.what())));
    } catch (const std::exception& e) {
      QFAIL(qPrintable(QString("%1: the engine raised: %2").arg(name, e.what())));
    }

    QVERIFY2(out.dtype() == outFormat.dtype,
             qPrintable(QString("%1: result dtype %2, PyTorch's %3")
                            .arg(name, QString::fromStdString(dtypeName(out.dtype())), expected.dtype)));
    QVERIFY2(out.sizes() == expected.shape, qPrintable(QString("%1: result shape %2, PyTorch's %3")
                                                           .arg(name, shapeText(out.sizes()), shapeText(expected.shape))));
    const std::vector<std::uint64_t> got = bitsOf(out);
    QCOMPARE(got.size(), expected.bits.size());

    // The inputs at element i, for elementwise cases (same number of elements as the output).
    auto inputsAt = [&](std::size_t i) {
      QStringList parts;
      for (std::size_t k = 0; k < encodedInputs.size(); ++k) {
        const Encoded& e = encodedInputs[k];
        if (e.bits.size() != got.size()) return QString();
        parts << QString("input %1 = %2").arg(k).arg(describe(*formatOf(e.dtype), e.bits[i]));
      }
      return parts.isEmpty() ? QString() : "; " + parts.join(", ");
    };

    QStringList failures;
    std::vector<int> viaAlternative(alternatives.size(), 0);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const std::int64_t tol = tolAt(i);
      if (matches(outFormat, got[i], expected.bits[i], tol)) continue;
      bool accepted = false;
      for (std::size_t a = 0; a < alternatives.size() && !accepted; ++a) {
        if (matches(outFormat, got[i], alternatives[a].second.bits[i], tol)) {
          ++viaAlternative[a];
          accepted = true;
        }
      }
      if (accepted) continue;
      const std::int64_t d = ulps(outFormat, got[i], expected.bits[i]);
      QString line = QString("element %1 %2: engine %3 vs PyTorch %4, %5 (tolerance %6 ulps)%7")
                         .arg(i)
                         .arg(indexText(expected.shape, static_cast<std::int64_t>(i)))
                         .arg(describe(outFormat, got[i]), describe(outFormat, expected.bits[i]))
                         .arg(d < 0    ? QString("not comparable")
                              : d == 0 ? QString("equal values, different bit patterns (the sign of a zero)")
                                       : QString("%1 ulps apart").arg(d))
                         .arg(tol)
                         .arg(inputsAt(i));
      for (const auto& [label, alt] : alternatives) line += QString("; %1: %2").arg(label, describe(outFormat, alt.bits[i]));
      failures << line;
    }
    for (std::size_t a = 0; a < alternatives.size(); ++a) {
      if (viaAlternative[a] == 0) continue;
      qInfo("%s: %d of %zu elements match %s rather than PyTorch 1.13's result (%s reference, off by up to %s "
            "ulps from the exact one here)", qPrintable(name), viaAlternative[a], got.size(), qPrintable(alternatives[a].first),
            qPrintable(cs["reference"].toString()), qPrintable(cs["torch_vs_exact_ulps"].toVariant().toString()));
    }
    if (!failures.isEmpty()) {
      const int shown = std::min<int>(failures.size(), 12);
      QFAIL(qPrintable(QString("%1 (%2 reference): %3 of %4 elements differ\n  %5%6")
                           .arg(name, cs["reference"].toString())
                           .arg(failures.size())
                           .arg(got.size())
                           .arg(failures.mid(0, shown).join("\n  "))
                           .arg(failures.size() > shown ? QString("\n  ... and %1 more").arg(failures.size() - shown)
                                                        : QString())));
    }
  }
};

QTEST_GUILESS_MAIN(TestDTypeParity)
#include "test_dtype_parity.moc"
