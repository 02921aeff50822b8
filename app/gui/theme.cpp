#include "app/gui/theme.h"

#include <algorithm>
#include <cmath>

namespace gpulab::app::theme {

namespace {

double channel(double c) { return c <= 0.03928 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4); }

double luminance(const QColor& c) {
  return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF());
}

double worstContrast(const QColor& c, const QPalette& palette) {
  return std::min(contrast(c, palette.color(QPalette::Base)), contrast(c, palette.color(QPalette::Window)));
}

}  // namespace

bool isDark(const QPalette& palette) { return luminance(palette.color(QPalette::Window)) < luminance(palette.color(QPalette::WindowText)); }

double contrast(const QColor& a, const QColor& b) {
  const double la = luminance(a), lb = luminance(b);
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

QColor readable(const QColor& colour, const QPalette& palette, double ratio) {
  if (worstContrast(colour, palette) >= ratio) return colour;
  // Toward the text's side (lighter on a dark palette, darker on a light one), in steps of lightness;
  // at the end of the scale the palette's own text colour, which is readable by the desktop's choice.
  const bool lighter = isDark(palette);
  QColor c = colour.toHsl();
  for (int step = 0; step < 100; ++step) {
    const float l = std::clamp(c.lightnessF() + (lighter ? 0.01f : -0.01f), 0.0f, 1.0f);
    c.setHslF(c.hslHueF(), c.hslSaturationF(), l);
    if (worstContrast(c, palette) >= ratio) return c.toRgb();
  }
  return palette.color(QPalette::WindowText);
}

QColor ink(Ink kind, const QPalette& palette) {
  const bool dark = isDark(palette);
  QColor c;
  switch (kind) {
    case Ink::Good: c = dark ? QColor(0x81, 0xc9, 0x95) : QColor(0x18, 0x80, 0x38); break;
    case Ink::Bad: c = dark ? QColor(0xf2, 0x8b, 0x82) : QColor(0xc5, 0x22, 0x1f); break;
    case Ink::Warning: c = dark ? QColor(0xfd, 0xb0, 0x5e) : QColor(0xa8, 0x4b, 0x00); break;
    case Ink::Muted: c = dark ? QColor(0x9a, 0xa0, 0xa6) : QColor(0x5f, 0x63, 0x68); break;
  }
  return readable(c, palette);
}

QString css(Ink kind, const QPalette& palette) { return "color:" + ink(kind, palette).name(); }

QColor mix(const QColor& from, const QColor& to, double share) {
  const auto along = [&](float a, float b) { return static_cast<float>(a + (b - a) * share); };
  return QColor::fromRgbF(along(from.redF(), to.redF()), along(from.greenF(), to.greenF()), along(from.blueF(), to.blueF()));
}

QColor tint(Ink kind, const QPalette& palette) {
  // A seventh of the way from the palette's Window to the ink: light green on white, dark green on black.
  return mix(palette.color(QPalette::Window), ink(kind, palette), 0.14);
}

QColor border(Ink kind, const QPalette& palette) { return ink(kind, palette); }

CodeColours codeColours(const QPalette& palette) {
  const bool dark = isDark(palette);
  // Light: close to GitHub's; dark: close to VS Code's Dark+.
  CodeColours c = dark ? CodeColours{QColor(0xc5, 0x86, 0xc0), QColor(0x4e, 0xc9, 0xb0), QColor(0xb5, 0xce, 0xa8), QColor(0xce, 0x91, 0x78), QColor(0x8b, 0x94, 0x9e)}
                       : CodeColours{QColor(0x7a, 0x3e, 0x9d), QColor(0x00, 0x6e, 0x8a), QColor(0x0b, 0x6e, 0x1d), QColor(0xa3, 0x15, 0x15), QColor(0x5f, 0x67, 0x6f)};
  for (QColor* k : {&c.keyword, &c.builtin, &c.number, &c.string, &c.comment}) *k = readable(*k, palette);
  return c;
}

}  // namespace gpulab::app::theme
