"""The initiator PDUs' commands by PDU number, kept as runs, answer as a table indexed by
PDU number does (the first row of a number given twice; <NA> for a number not there, a PDU
without a command, a missing or fractional number)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from istrace.merge.ties import PduCommands


def _by_table(pdu: pd.Series, cmd: pd.Series, ask: pd.Series) -> list[int | None]:
    lut = pd.Series(pd.to_numeric(cmd, errors="coerce").astype("Int64").values,
                    index=pd.to_numeric(pdu, errors="coerce"))
    lut = lut[~lut.index.duplicated() & lut.index.notna()]  # a missing number: no PDU's
    return [None if pd.isna(v) else int(v) for v in lut.reindex(ask).values]


def test_runs_answer_as_the_table_indexed_by_pdu_number() -> None:
    rng = np.random.default_rng(3)
    n = 64 * 320
    # 8 KiB Data-In PDUs: a command's in a row, another command's PDU now and then between
    cmd = np.repeat(np.arange(n // 64), 64).astype(object)
    between = rng.random(n) < 0.03
    cmd[between] = rng.integers(0, n // 64, int(between.sum()))
    cmd[rng.random(n) < 0.01] = None  # login, NOP: no command
    pdu = np.arange(n, dtype=float)
    pdu[rng.random(n) < 0.005] = np.nan
    skip = rng.random(n) < 0.01  # numbers not in the table
    pdu, cmd = pdu[~skip], cmd[~skip]
    dup = rng.integers(0, len(pdu), 50)  # a number given twice: the first row counts
    pdu = np.concatenate([pdu, pdu[dup]])
    cmd = np.concatenate([cmd, np.full(50, 7, object)])
    p, c = pd.Series(pdu), pd.Series(cmd, dtype=object)
    ask = pd.Series(np.concatenate([np.arange(-3, n + 3, dtype=float), [np.nan, 10.5]]))
    runs = PduCommands(p, c)
    assert len(runs) < n // 5  # runs, not PDUs
    got = [None if pd.isna(v) else int(v) for v in runs.of(ask)]
    assert got == _by_table(p, c, ask)


def test_no_pdu_numbers() -> None:
    runs = PduCommands(pd.Series([np.nan]), pd.Series([1]))
    assert len(runs) == 0
    assert runs.of(pd.Series([0.0, np.nan])).isna().all()
