#include "app/course/lab_json.h"

#include <QJsonArray>
#include <QStringList>
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/lab/lab_schema.h"

namespace gpulab::course {
namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

QJsonValue valueJson(const lab::Value& v) {
  return std::visit(
      [](const auto& x) -> QJsonValue {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::int64_t>) return qint64(x);
        else if constexpr (std::is_same_v<T, std::string>) return q(x);
        else return x;
      },
      v);
}

// A JSON number is an integer when it is one exactly and small enough to be read back as one.
lab::Value valueFrom(const QJsonValue& v) {
  if (v.isBool()) return v.toBool();
  if (v.isString()) return v.toString().toStdString();
  const double d = v.toDouble();
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0) return static_cast<std::int64_t>(d);
  return d;
}

// ---- One field, to and from JSON, by the member's type (engine/lab/lab_schema.h) ----

template <class S>
QJsonObject encodeFields(const S& s);
template <class S>
bool decodeFields(const QJsonObject& o, S& s, QString& why);

QJsonValue encode(const std::string& v) { return q(v); }
QJsonValue encode(double v) { return v; }
QJsonValue encode(bool v) { return v; }
QJsonValue encode(const std::vector<double>& xs) {
  QJsonArray a;
  for (double x : xs) a.append(x);
  return a;
}
QJsonValue encode(const lab::Axis& a) { return encodeFields(a); }
QJsonValue encode(const std::vector<lab::Axis>& axes) {
  QJsonArray a;
  for (const lab::Axis& axis : axes) a.append(encodeFields(axis));
  return a;
}
QJsonValue encode(const std::vector<lab::SeriesSpec>& series) {
  QJsonArray a;
  for (const lab::SeriesSpec& s : series) a.append(encodeFields(s));
  return a;
}
QJsonValue encode(const std::vector<lab::Value>& cells) {
  QJsonArray a;
  for (const lab::Value& c : cells) a.append(valueJson(c));
  return a;
}
template <class E>
  requires std::is_enum_v<E>
QJsonValue encode(E v) {
  return q(lab::toString(v));
}

// Each returns false when the JSON value is not of the field's type.
bool decode(const QJsonValue& v, std::string& out) {
  if (!v.isString()) return false;
  out = v.toString().toStdString();
  return true;
}
bool decode(const QJsonValue& v, double& out) {
  if (!v.isDouble()) return false;
  out = v.toDouble();
  return true;
}
bool decode(const QJsonValue& v, bool& out) {
  if (!v.isBool()) return false;
  out = v.toBool();
  return true;
}
bool decode(const QJsonValue& v, std::vector<double>& out) {
  if (!v.isArray()) return false;
  for (const QJsonValue& x : v.toArray()) {
    if (!x.isDouble()) return false;
    out.push_back(x.toDouble());
  }
  return true;
}
bool decode(const QJsonValue& v, std::vector<lab::Value>& out) {
  if (!v.isArray()) return false;
  for (const QJsonValue& c : v.toArray()) {
    if (c.isArray() || c.isObject() || c.isNull()) return false;
    out.push_back(valueFrom(c));
  }
  return true;
}
template <class S>
bool decodeObjects(const QJsonValue& v, std::vector<S>& out) {
  if (!v.isArray()) return false;
  QString ignored;
  for (const QJsonValue& item : v.toArray()) {
    S s;
    if (!item.isObject() || !decodeFields(item.toObject(), s, ignored)) return false;
    out.push_back(std::move(s));
  }
  return true;
}
bool decode(const QJsonValue& v, std::vector<lab::Axis>& out) { return decodeObjects(v, out); }
bool decode(const QJsonValue& v, std::vector<lab::SeriesSpec>& out) { return decodeObjects(v, out); }
bool decode(const QJsonValue& v, lab::Axis& out) {
  QString ignored;
  return v.isObject() && decodeFields(v.toObject(), out, ignored);
}
std::optional<lab::ViewKind> parseName(const std::string& s, lab::ViewKind*) { return lab::parseViewKind(s); }
std::optional<lab::SeriesStyle> parseName(const std::string& s, lab::SeriesStyle*) { return lab::parseSeriesStyle(s); }
std::optional<lab::MarkerKind> parseName(const std::string& s, lab::MarkerKind*) { return lab::parseMarkerKind(s); }
std::optional<lab::MessageKind> parseName(const std::string& s, lab::MessageKind*) { return lab::parseMessageKind(s); }
template <class E>
  requires std::is_enum_v<E>
bool decode(const QJsonValue& v, E& out) {
  const std::optional<E> e = parseName(v.toString().toStdString(), static_cast<E*>(nullptr));
  if (!v.isString() || !e) return false;
  out = *e;
  return true;
}

// "a point needs 'view', 'series' (strings), 'x' (a list of numbers) and 'y' (a number)": the required
// fields, grouped by what they hold.
template <class S>
QString needs() {
  std::vector<std::pair<lab::schema::FieldType, QStringList>> groups;
  std::apply(
      [&](const auto&... f) {
        auto add = [&](const auto& field) {
          if (field.presence != lab::schema::Presence::Required) return;
          auto at = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == field.type; });
          if (at == groups.end()) at = groups.insert(groups.end(), {field.type, {}});
          at->second << QString("'%1'").arg(field.name);
        };
        (add(f), ...);
      },
      lab::schema::Fields<S>::all);
  QStringList parts;
  for (const auto& [type, names] : groups) {
    QString what = q(lab::schema::describe(type));
    if (names.size() > 1 && what == "a string") what = "strings";
    else if (names.size() > 1 && what == "a number") what = "numbers";
    parts << names.join(", ") + " (" + what + ")";
  }
  const QString last = parts.size() > 1 ? " and " + parts.takeLast() : QString();
  return QString(lab::schema::Fields<S>::what) + " needs " + parts.join(", ") + last;
}

template <class S>
QJsonObject encodeFields(const S& s) {
  QJsonObject o;
  std::apply(
      [&](const auto&... f) {
        auto put = [&](const auto& field) {
          const auto& value = s.*field.member;
          using M = std::decay_t<decltype(value)>;
          if constexpr (std::is_scalar_v<M> || std::is_same_v<M, std::string>) {  // what OmitDefault is for: a note, a flag
            if (field.presence == lab::schema::Presence::OmitDefault && value == M{}) return;
          }
          o[field.name] = encode(value);
        };
        (put(f), ...);
      },
      lab::schema::Fields<S>::all);
  return o;
}

template <class S>
bool decodeFields(const QJsonObject& o, S& s, QString& why) {
  bool ok = true;
  std::apply(
      [&](const auto&... f) {
        auto take = [&](const auto& field) {
          if (!ok) return;
          const QJsonValue v = o.value(field.name);
          if (v.isUndefined() && field.presence != lab::schema::Presence::Required) return;
          using M = std::decay_t<decltype(s.*field.member)>;
          M value{};
          if (decode(v, value)) {
            s.*field.member = std::move(value);
            return;
          }
          ok = false;
          if (v.isUndefined() || field.presence == lab::schema::Presence::Required) why = needs<S>();
          else why = QString("%1's '%2' must be %3").arg(lab::schema::Fields<S>::what, field.name, q(lab::schema::describe(field.type)));
          if constexpr (std::is_enum_v<M>) {
            if (v.isString()) {
              why = QString("%1 with an unknown %2 '%3' (%4)").arg(lab::schema::Fields<S>::what, field.name, v.toString(),
                                                                    q(lab::schema::describe(field.type)));
            }
          }
        };
        (take(f), ...);
      },
      lab::schema::Fields<S>::all);
  return ok;
}

// Record fields: "a.b" nests; nested objects are read back flat.
void insertField(QJsonObject& o, const QString& name, const QJsonValue& v) {
  const qsizetype dot = name.indexOf('.');
  if (dot < 0) {
    o[name] = v;
    return;
  }
  QJsonObject inner = o.value(name.left(dot)).toObject();
  insertField(inner, name.mid(dot + 1), v);
  o[name.left(dot)] = inner;
}

void flatten(const QJsonObject& o, const QString& prefix, std::vector<std::pair<std::string, lab::Value>>& out) {
  for (auto it = o.begin(); it != o.end(); ++it) {
    const QString name = prefix.isEmpty() ? it.key() : prefix + "." + it.key();
    if (prefix.isEmpty() && it.key() == "event") continue;
    if (it->isObject()) flatten(it->toObject(), name, out);
    else if (!it->isArray() && !it->isNull()) out.emplace_back(name.toStdString(), valueFrom(*it));
  }
}

}  // namespace

QJsonObject toJson(const lab::Update& update) {
  return std::visit(
      [](const auto& u) -> QJsonObject {
        using U = std::decay_t<decltype(u)>;
        if constexpr (std::is_same_v<U, lab::Record>) {
          QJsonObject o{{"event", q(u.event)}};
          for (const auto& [name, value] : u.fields) insertField(o, q(name), valueJson(value));
          return o;
        } else {
          QJsonObject o = encodeFields(u);
          o["event"] = lab::schema::Fields<U>::event;
          return o;
        }
      },
      update);
}

std::optional<lab::Update> updateFromJson(const QJsonObject& o, QString* error) {
  const QString event = o.value("event").toString();
  if (event.isEmpty()) {
    if (error) *error = "no \"event\" (a string)";
    return std::nullopt;
  }
  std::optional<lab::Update> out;
  QString why;
  bool known = false;
  lab::schema::forEachUpdate([&](auto u) {
    using U = decltype(u);
    if (known || event != lab::schema::Fields<U>::event) return;
    known = true;
    if (decodeFields(o, u, why)) out = std::move(u);
  });
  if (!known) {  // any other name is a Record
    lab::Record r;
    r.event = event.toStdString();
    flatten(o, {}, r.fields);
    return r;
  }
  if (!out && error) *error = why;
  return out;
}

}  // namespace gpulab::course
