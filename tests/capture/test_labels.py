"""Label helpers (istrace.capture.labels) against pandas' own results."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from istrace.capture.labels import used_labels


@pytest.mark.parametrize("codes", [
    [0, 2, 2, -1, 0], [1, 1, 1], [-1, -1], [], [3, 0, 3], [0, 1, 2, 3]])
def test_used_labels_is_remove_unused_categories(codes: list[int]) -> None:
    labels = pd.Index(["i2t", "t2i", "x", "y"], dtype=object)
    arr = np.array(codes, np.int8)
    want = pd.Categorical.from_codes(arr, labels).remove_unused_categories()
    got = used_labels(arr, labels)
    assert got.equals(want)
    assert list(got.categories) == list(want.categories)
    assert list(got.codes) == list(want.codes)


def test_used_labels_on_a_large_slice_matches_pandas() -> None:
    rng = np.random.default_rng(7)
    labels = pd.Index([f"c{i}" for i in range(300)], dtype=object)
    codes = rng.choice(np.r_[-1, np.arange(0, 300, 7)], 100_000).astype(np.int16)
    want = pd.Categorical.from_codes(codes, labels).remove_unused_categories()
    got = used_labels(codes, labels)
    assert got.equals(want) and list(got.categories) == list(want.categories)
