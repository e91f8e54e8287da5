"""The lessons' colours: safe for colour-vision deficiency, each with a second encoding (WCAG 2.1 1.4.1, 1.4.11).

Every name a figure tells apart by colour (narrow, right, wide; QDQ, QOperator) also has its own marker and line
style, so nothing is told by colour alone; every colour reaches 3:1 against the white background. ``contrast``
(WCAG's ratio) and ``distance`` (CIE76 colour difference, optionally as a protanope, deuteranope or tritanope sees
it: Machado, Oliveira and Fernandes 2009, full severity, applied in linear RGB) let the tests check both. Free of
matplotlib, so lessons can name colours without importing it.
"""
from __future__ import annotations

import numpy as np

BACKGROUND = "#ffffff"
MIN_CONTRAST = 3.0  # WCAG 2.1 1.4.11: graphical objects against adjacent colours

# Okabe and Ito's vermillion, bluish green and blue, darkened where they fell below 3:1 on white
COLORS = {"narrow": "#C04F00", "right": "#007A5E", "wide": "#0072B2", "QDQ": "#AA3377", "QOperator": "#555555"}
MARKERS = {"narrow": "o", "right": "s", "wide": "^", "QDQ": "D", "QOperator": "v"}
LINESTYLES = {"narrow": "--", "right": "-", "wide": ":", "QDQ": "-", "QOperator": "--"}
# series with no name of their own (models, methods, runs), in order; each keeps a marker and a line style too
CYCLE = ("#0072B2", "#C04F00", "#007A5E", "#AA3377", "#555555", "#8A6100")
CYCLE_MARKERS = ("o", "s", "^", "D", "v", "P")
CYCLE_LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1)), (0, (1, 1)))
HATCHES = ("", "//", "..", "xx", "\\\\", "oo")  # bars: the second encoding
NEUTRAL = "#666666"   # data drawn in grey (real values, FP32's bars): 5.7:1 on white
ALERT = "#C8102E"     # clipped ranges, misreads: 5.9:1 on white, and always named in words too

_MACHADO = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}
_SRGB_TO_XYZ = ((0.4124, 0.3576, 0.1805), (0.2126, 0.7152, 0.0722), (0.0193, 0.1192, 0.9505))
_WHITE_XYZ = (0.95047, 1.0, 1.08883)


def style(name: str, i: int = 0) -> dict:
    """Colour, marker and line style of ``name`` (the i-th series when it has none of its own): matplotlib keywords."""
    k = i % len(CYCLE)
    return {"color": COLORS.get(name, CYCLE[k]), "marker": MARKERS.get(name, CYCLE_MARKERS[k]),
            "linestyle": LINESTYLES.get(name, CYCLE_LINESTYLES[k])}


def rgb(color: str) -> np.ndarray:
    """A ``#rrggbb`` colour as three sRGB values in [0, 1]."""
    h = color.lstrip("#")
    return np.array([int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)])


def linear(srgb: np.ndarray) -> np.ndarray:
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def luminance(color: str) -> float:
    """WCAG's relative luminance."""
    return float(linear(rgb(color)) @ np.array([0.2126, 0.7152, 0.0722]))


def contrast(a: str, b: str = BACKGROUND) -> float:
    """WCAG's contrast ratio of two colours, 1 to 21."""
    dark, light = sorted((luminance(a), luminance(b)))
    return (light + 0.05) / (dark + 0.05)


def _lab(lin_rgb: np.ndarray) -> np.ndarray:
    xyz = np.array(_SRGB_TO_XYZ) @ np.clip(lin_rgb, 0, 1) / np.array(_WHITE_XYZ)
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def distance(a: str, b: str, vision: str | None = None) -> float:
    """CIE76 difference of two colours (about 2.3 is just noticeable), as ``vision`` (a key of the simulations,
    or None for typical colour vision) sees them."""
    la, lb = linear(rgb(a)), linear(rgb(b))
    if vision:
        m = np.array(_MACHADO[vision])
        la, lb = m @ la, m @ lb
    return float(np.linalg.norm(_lab(la) - _lab(lb)))


SIMULATIONS = tuple(_MACHADO)
