"""Label helpers (istrace.capture.labels) against pandas' own results."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from istrace.capture.labels import coded_labels, object_labels, used_labels


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


@pytest.mark.parametrize("codes", [[0, 2, 2, 0], [1, 1, 1], [], [3, 0, 3, 1], [2]])
def test_coded_labels_is_object_labels_of_the_names(codes: list[int]) -> None:
    """The tracker's kinds and notes, numbered as found: the categorical object_labels makes of
    the names themselves (the used ones, sorted, plain objects), codes and all."""
    names = ["retransmit", "dupack", "", "loss_episode"]
    arr = np.array(codes, np.int64)
    want = object_labels(np.array(names, object)[arr])
    got = coded_labels(arr, names)
    assert list(got.categories) == list(want.categories)
    assert got.categories.dtype == object and list(got.codes) == list(want.codes)
