#pragma once
// The lab protocol (engine/lab/lab.h) as JSON: one object per update, one line each. It is what
// `gpulab-cli --json` prints, what a reference run file stores, what the GUI replays a reference run
// from (so a recording is shown through exactly the views a live run uses), and what a code cell or
// a Python lab sends. Each update's fields come from its table in engine/lab/lab_schema.h; this file
// only says how each kind of field is written.
//
//   {"event":"view","id":"loss","title":"Loss","kind":"line","x":[{"label":"step","unit":""}],
//    "y":{"label":"loss","unit":""},"y_from_zero":false,"series":[{"id":"train","label":"train loss",
//    "style":"line"}],"columns":[...],"note":"..."}
//   {"event":"point","view":"loss","series":"train","x":[10],"y":0.43}
//   {"event":"marker","view":"memory","x":[2.5],"label":"OOM","kind":"oom"}
//   {"event":"level","view":"memory","label":"capacity","y":4294967296}
//   {"event":"bar","view":"report","series":"reserved","category":"before","value":123}
//   {"event":"row","view":"epochs","cells":[1,0.43,"n/a"]}
//   {"event":"span","view":"timeline","lane":"forward","label":"step 3","start":0.1,"end":0.2}
//   {"event":"device","device":"cuda:0","label":"cuda:0 (...)","emulated":true}
//   {"event":"message","level":"info","text":"..."}
//   {"event":"measurement","name":"peak allocated","value":123,"unit":"bytes"}
//   {"event":"progress","done":3,"total":10,"label":"epoch 1/3"}
// Any other event name is a Record: {"event":"step","epoch":1,...}; a field "a.b" nests as
// {"a":{"b":...}} and is read back flat.
#include <QJsonObject>
#include <QString>
#include <optional>

#include "engine/lab/lab.h"

namespace gpulab::course {

QJsonObject toJson(const lab::Update& update);

// Parses one update, strictly: a field of the wrong type is refused, not read as its default (a
// recording or a kernel that writes one is broken, and says so). On a malformed object returns
// nothing and sets `error` to what is wrong
// ("a point needs 'view', 'series' (strings), 'x' (a list of numbers) and 'y' (a number)").
std::optional<lab::Update> updateFromJson(const QJsonObject& o, QString* error);

}  // namespace gpulab::course
