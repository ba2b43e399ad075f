"""save_png draws a figure once and cuts the tight box out of its pixels: the picture must be
savefig(bbox_inches="tight")'s, at most a pixel off, whatever the figure's margins."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from istrace.plot.png import save_png  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from PIL import Image  # noqa: E402

DPI = 110


def _figure(kind: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.linspace(0, 10, 500)
    ax.plot(x, np.sin(x), label="sin")
    ax.set_title("a title near the top edge")
    ax.set_xlabel("time [ms]")
    ax.legend(loc="upper right")
    if kind == "wide margins":  # the ink well inside the figure
        fig.subplots_adjust(left=0.3, right=0.7, top=0.7, bottom=0.3)
    elif kind == "ink past the edge":  # a label the tight box must grow the figure for
        fig.text(1.05, 0.5, "beyond the right edge")
    elif kind == "coloured background":  # the margin past the edge takes this colour
        fig.set_facecolor("#ffe08a")
        ax.set_axis_off()
        ax.set_title("")
        ax.set_position((0.01, 0.01, 0.98, 0.98))
    return fig


def _pixels(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGBA")).astype(int)


@pytest.mark.parametrize("kind", ["default", "wide margins", "ink past the edge",
                                  "coloured background"])
def test_the_picture_is_savefigs_tight_one(tmp_path: Path, kind: str) -> None:
    ref, got = tmp_path / "ref.png", tmp_path / "got.png"
    fig = _figure(kind)
    fig.savefig(ref, dpi=DPI, bbox_inches="tight")
    save_png(fig, got, DPI)
    plt.close(fig)
    a, b = _pixels(ref), _pixels(got)
    assert abs(a.shape[0] - b.shape[0]) <= 1 and abs(a.shape[1] - b.shape[1]) <= 1
    assert _closest(a, b) < 3.0  # of 255: antialiasing; a picture off by pixels is 5-20
    # the margin is the figure's background, as savefig paints it
    for corner in (b[0, 0], b[0, -1], b[-1, 0], b[-1, -1]):
        assert (corner == a[0, 0]).all()


def _closest(a: np.ndarray, b: np.ndarray) -> float:
    """The mean difference of two pictures, b moved by at most a pixel each way to fit a."""
    h, w = min(a.shape[0], b.shape[0]) - 2, min(a.shape[1], b.shape[1]) - 2
    return min(float(np.abs(a[1:1 + h, 1:1 + w] - b[1 + dy:1 + dy + h, 1 + dx:1 + dx + w]).mean())
               for dy in (-1, 0, 1) for dx in (-1, 0, 1))


def test_its_dpi_is_recorded_and_the_figures_kept(tmp_path: Path) -> None:
    fig = _figure("default")
    own = fig.dpi
    save_png(fig, tmp_path / "f.png", DPI)
    assert fig.dpi == own != DPI  # as savefig leaves it, for a later SVG or PNG
    plt.close(fig)
    assert round(Image.open(tmp_path / "f.png").info["dpi"][0]) == DPI
