"""The commands and verdict tables (istrace.capture.cmdtable, outputs.write_verdict): read back
as written, target times moved to the initiator's clock, and DuckDB joining them over a
directory of captures (the query docs/report.md shows)."""

from pathlib import Path

import duckdb
import pandas as pd
from istrace.capture import cmdtable, layout
from istrace.capture.outputs import write_verdict


def _commands(n: int, t0: int) -> pd.DataFrame:
    return pd.DataFrame({
        "cmd": range(n), "cdb_name": ["READ(10)"] * n,
        "issue_ts_ns": [t0 + 1000 * i for i in range(n)],
        "resp_ts_ns": [t0 + 1000 * i + 400 + 100 * i for i in range(n)],
        "resp_time_us": [0.4 + 0.1 * i for i in range(n)],
        "first_data_ts_ns": [None] * n})


def _verdict(cause: str, mbps: float) -> dict:
    return {"primary": {"cause": cause}, "shares": {cause: 0.7, "tcp_cwnd": 0.3},
            "unsure": False, "evidence": {"direction": "t2i", "sender": "target",
                                          "throughput_MBps": mbps}}


def test_commands_on_both_clocks(tmp_path: Path) -> None:
    cmds = _commands(4, 10_000)
    cmdtable.write(tmp_path, "initiator", cmds, offset_ns=250)
    cmdtable.write(tmp_path, "target", cmds, offset_ns=250)
    ini, tgt = cmdtable.read(tmp_path, "initiator"), cmdtable.read(tmp_path, "target")
    assert ini["issue_ts_ns_merged"].tolist() == cmds["issue_ts_ns"].tolist()
    assert tgt["issue_ts_ns_merged"].tolist() == [t - 250 for t in cmds["issue_ts_ns"]]
    assert tgt["first_data_ts_ns_merged"].isna().all()  # no time: none on either clock
    assert ini["cdb_name"].tolist() == ["READ(10)"] * 4
    cmdtable.remove(tmp_path, "target")
    assert not layout.command_table(tmp_path, "target").exists()


def test_duckdb_joins_commands_and_verdicts_of_many_captures(tmp_path: Path) -> None:
    for run, n, cause, mbps in (("run-a", 3, "initiator_concurrency", 46.5),
                                ("run-b", 5, "tcp_rwnd", 98.0)):
        for host in layout.HOSTS:
            cmdtable.write(tmp_path / run, host, _commands(n, 0), offset_ns=0)
        write_verdict(_verdict(cause, mbps), tmp_path / run)
    got = duckdb.sql(f"""
        WITH c AS (
          SELECT regexp_extract(filename, '([^/]+)/commands/', 1) AS capture,
                 count(*) AS commands, median(resp_time_us) AS p50_us
          FROM read_parquet('{tmp_path}/*/commands/*/*.parquet', hive_partitioning = true,
                            filename = true)
          WHERE host = 'initiator' GROUP BY ALL),
        v AS (
          SELECT regexp_extract(filename, '([^/]+)/verdict.parquet', 1) AS capture,
                 cause, share, throughput_MBps
          FROM read_parquet('{tmp_path}/*/verdict.parquet', filename = true) WHERE "primary")
        SELECT * FROM c JOIN v USING (capture) ORDER BY capture""").df()
    assert got["capture"].tolist() == ["run-a", "run-b"]
    assert got["commands"].tolist() == [3, 5]
    assert got["p50_us"].round(3).tolist() == [0.5, 0.6]
    assert got["cause"].tolist() == ["initiator_concurrency", "tcp_rwnd"]
    assert got["share"].tolist() == [0.7, 0.7]
    assert got["throughput_MBps"].tolist() == [46.5, 98.0]
