#pragma once
// The few colours the window chooses itself -- text that means something (met, not met, an error, a
// warning, a note), a tinted box, the code highlighting -- for the palette it is shown in, light or
// dark (the desktop's). Every text colour here is made readable on the palette's Base and Window: at
// least kTextContrast (WCAG's 4.5:1 for text), moved in lightness where the chosen one is not.
// Everything else (plots' axes and text, tables, labels) takes the palette's own roles.
#include <QColor>
#include <QPalette>
#include <QString>

namespace gpulab::app::theme {

inline constexpr double kTextContrast = 4.5;
inline constexpr double kLineContrast = 3.0;  // WCAG's 3:1 for lines and shapes that carry meaning

bool isDark(const QPalette& palette);
// WCAG's contrast ratio of two colours, 1 (the same) to 21 (black on white).
double contrast(const QColor& a, const QColor& b);
// `colour`, or the nearest colour of its hue that keeps `ratio` against the palette's Base and Window.
QColor readable(const QColor& colour, const QPalette& palette, double ratio = kTextContrast);

enum class Ink { Good, Bad, Warning, Muted };
QColor ink(Ink kind, const QPalette& palette);
// "color:#188038", for the window's rich text.
QString css(Ink kind, const QPalette& palette);

// `from` moved `share` (0..1) of the way to `to`: a tint, a grid between background and text.
QColor mix(const QColor& from, const QColor& to, double share);

// A box that says something (a met challenge, a warning): a background tinted toward `kind` that the
// palette's text stays readable on, and its border.
QColor tint(Ink kind, const QPalette& palette);
QColor border(Ink kind, const QPalette& palette);

struct CodeColours {
  QColor keyword, builtin, number, string, comment;
};
// Python's highlighting on the palette's Base.
CodeColours codeColours(const QPalette& palette);

}  // namespace gpulab::app::theme
