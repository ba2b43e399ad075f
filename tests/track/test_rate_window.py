"""The tracker's delivery rate: a trailing window whose start is rounded to a grid, so a slice
carries a bounded history, whatever the stream's rate and the window's length."""

import numpy as np
import pytest
from istrace.track import estimate
from istrace.track import tracker as track
from test_track_slices import random_transfer


def stream(rows: int, seed: int = 0, gaps: tuple[int, ...] = (0, 700, 1500, 3000, 40_000),
           acked: tuple[int, ...] = (0, 1448, 2896, 65160)) -> tuple[np.ndarray, np.ndarray]:
    """Times (jittered, some equal) and bytes acknowledged (rising) of a busy stream."""
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.choice(gaps, rows)) + 10**18 // 7
    cum = np.cumsum(rng.choice(acked, rows))
    return ts.astype(np.int64), cum.astype(np.int64)


def exact_rate(ts: np.ndarray, cum: np.ndarray, w: int) -> np.ndarray:
    """The window from each row's time minus w, no grid."""
    start = np.searchsorted(ts, ts - w, side="left")
    return (cum - cum[start]) * 1e9 / np.maximum(ts - ts[start], w // 4)


@pytest.mark.parametrize("w", [1_000_000, 37_000_001, 200_000_000])
def test_grid_rate_is_within_a_step_of_the_exact_window(w):
    """On a full-rate stream (a row every few microseconds) the window shorter by under a
    step changes the rate by about that step's share of the window's bytes."""
    ts, cum = stream(400_000, gaps=(700, 1500, 3000), acked=(1448, 2896))
    got = estimate.trailing_rate(ts, cum, w)
    want = exact_rate(ts, cum, w)
    late = ts >= ts[0] + 2 * w  # whole windows: the first rows' are shorter either way
    assert late.sum() > 1000
    rel = np.abs(got[late] - want[late]) / want[late]
    assert rel.max() < 4 / estimate.RATE_GRID_STEPS, rel.max()
    assert (got != want).any()  # the grid is not a no-op on these times


def test_history_of_window_starts_gives_the_whole_streams_rates():
    """Rates made a slice at a time, each slice given only the rows before it that can start a
    window, equal the rates over the whole stream at once."""
    ts, cum = stream(50_000, seed=3)
    w = int((ts[-1] - ts[0]) // 7)
    whole = estimate.trailing_rate(ts, cum, w)
    hist_ts = hist_cum = np.zeros(0, np.int64)
    last, got, most = None, [], 0
    for a in range(0, len(ts), 997):
        t, c = ts[a:a + 997], cum[a:a + 997]
        got.append(estimate.trailing_rate(np.concatenate([hist_ts, t]),
                                          np.concatenate([hist_cum, c]), w, len(hist_ts)))
        starts = estimate.window_starts(t, w, last)
        last = int(t[-1])
        hist_ts, hist_cum = np.concatenate([hist_ts, t[starts]]), np.concatenate([hist_cum,
                                                                                 c[starts]])
        keep = int(np.searchsorted(hist_ts, t[-1] - w, side="left"))
        hist_ts, hist_cum = hist_ts[keep:], hist_cum[keep:]
        most = max(most, len(hist_ts))
    np.testing.assert_array_equal(np.concatenate(got), whole)
    assert most <= estimate.RATE_GRID_STEPS + 1
    # the window held thousands of rows: the history is the grid's, not the window's
    assert np.searchsorted(ts, ts[-1] - w) < len(ts) - 5 * estimate.RATE_GRID_STEPS


def test_tracker_keeps_only_window_starts(monkeypatch):
    """The tracker's carried history stays within the grid's size on a transfer whose rate
    window holds many more rows (one step per window: every slice's history is 2 rows)."""
    monkeypatch.setattr(estimate, "RATE_GRID_STEPS", 1)
    held = []
    rate = estimate.trailing_rate

    def spy(ts, cum, w, first=0):
        held.append(first)  # the rows of history the slice was given
        return rate(ts, cum, w, first)
    monkeypatch.setattr(estimate, "trailing_rate", spy)
    track.track_pcap(random_transfer(1), None, host="target", dirs=("t2i",), slice_rows=16)
    assert len(held) > 20 and max(held) <= 2, held


def test_the_rtt_median_from_its_histogram_is_numpys_within_a_bin() -> None:
    """The loss episodes' kind needs the direction's median RTT; a histogram of its logarithm
    holds it in a fixed size, within a bin's width (0.3%) of np.median, whatever the order
    the samples came in, zero and huge samples included."""
    from istrace.track.estimate import LogHistogram

    rng = np.random.default_rng(4)
    for us in (rng.lognormal(5, 1.5, 100_001), rng.lognormal(2, 0.1, 10_000),
               np.array([0.0, 0.0, 7.0]), np.array([250.0]), np.array([1e11, 1.0])):
        h = LogHistogram()
        for part in np.array_split(rng.permutation(us), 7):
            h.add(part)
        assert len(h) == len(us)
        want, got = float(np.median(us)), h.median()
        assert got is not None
        assert abs(got - want) <= 0.003 * max(want, 1e-3) or (want == 0 and got < 0.01), \
            (got, want)
    assert LogHistogram().median() is None
