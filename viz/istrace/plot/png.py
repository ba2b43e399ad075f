"""A figure to PNG, its blank margins cut off, drawing it once.

`savefig(bbox_inches="tight")` draws a figure twice: once without output to find where its
ink is, once more, moved, to paint it. Both walk every artist and lay out every text (half of
a report's drawing CPU, a second of a full-rate capture's twenty). Here the figure is painted
once at its own size, and the tight box cut out of the pixels (its margin, where it reaches
past the figure's edge, in the figure's background): the same picture, shifted by less than
a pixel. A figure whose ink itself reaches past its edges is saved the old way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.image import imsave

# savefig's own default margin around the ink (rcParams savefig.pad_inches)
PAD_INCHES = 0.1


def save_png(fig: Figure, path: Path, dpi: float) -> None:
    """`fig.savefig(path, dpi=dpi, bbox_inches="tight")`, zlib's fastest level (the same
    pixels; level 6 was a tenth of the drawing)."""
    own_dpi = fig.dpi
    try:
        _save(fig, path, dpi)
    finally:
        fig.set_dpi(own_dpi)  # as savefig leaves it (for a later SVG or PNG of the figure)


def _save(fig: Figure, path: Path, dpi: float) -> None:
    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ink = fig.get_tightbbox(canvas.get_renderer())
    width, height = canvas.get_width_height()
    if ink.x0 < 0 or ink.y0 < 0 or ink.x1 * dpi > width or ink.y1 * dpi > height:
        fig.savefig(path, dpi=dpi, bbox_inches="tight", pil_kwargs={"compress_level": 1})
        return
    x0, y0, x1, y1 = (v * dpi for v in ink.padded(PAD_INCHES).extents)
    left, bottom = int(np.floor(x0)), int(np.floor(y0))
    w, h = int(x1 - x0), int(y1 - y0)
    top = height - bottom - h  # pixel rows count from the top, the box's y from the bottom
    # the margin the box takes beyond the figure's edges is the figure's background, as
    # savefig paints it
    out = np.empty((h, w, 4), np.uint8)
    out[:] = np.round(np.array(to_rgba(fig.get_facecolor())) * 255).astype(np.uint8)
    src = np.asarray(canvas.buffer_rgba())
    r0, c0 = max(top, 0), max(left, 0)
    r1, c1 = min(top + h, height), min(left + w, width)
    out[r0 - top:r1 - top, c0 - left:c1 - left] = src[r0:r1, c0:c1]
    imsave(path, out, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
