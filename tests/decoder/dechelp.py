"""Run istrace-decode on a capture and compare its tables with what the capture holds."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
NATIVE_BIN = REPO / "decoder" / "istrace-decode"
ASAN_BIN = REPO / "decoder" / "fuzz" / "istrace-decode-asan"

# Sanitizer reports get their own exit codes so they cannot pass as a normal "no iSCSI" exit.
SAN_ENV = {
    "ASAN_OPTIONS": "halt_on_error=1:abort_on_error=0:exitcode=86:detect_leaks=1",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
}
HEX_COLS = {"itt", "ttt", "flags"}


@dataclass
class Decoded:
    rc: int
    stderr: str
    pdus: pd.DataFrame
    commands: pd.DataFrame
    connections: pd.DataFrame
    outdir: Path
    extra: dict[str, str] = field(default_factory=dict)


def _read(path: Path) -> pd.DataFrame:
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def run_decoder(binary: Path, args: list[str], stdin: bytes | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, **SAN_ENV)
    r = subprocess.run([str(binary), *args], input=stdin, capture_output=True, timeout=timeout,
                       env=env, check=False)
    err = r.stderr.decode(errors="replace")
    # A sanitizer finding is a failure whatever the decoder would have returned.
    assert r.returncode not in (86, 87), f"sanitizer finding:\n{err[-4000:]}"
    assert "runtime error:" not in err and "AddressSanitizer" not in err, err[-4000:]
    assert r.returncode >= 0, f"killed by signal {-r.returncode}: {err[-2000:]}"
    return r


def decode(binary: Path, capture: str | Path | None, *extra: str, stdin: bytes | None = None,
           outdir: Path | None = None) -> Decoded:
    """Decode to a CSV dir (capture None means read `stdin` through `-`)."""
    # Next to the capture (pytest's tmp dir) so nothing is left behind in /tmp.
    where = None if capture is None else Path(capture).parent
    out = outdir or Path(tempfile.mkdtemp(prefix="dec-", dir=where))
    src = "-" if capture is None else str(capture)
    r = run_decoder(binary, ["--csv-dir", str(out), *extra, src], stdin=stdin)
    return Decoded(r.returncode, r.stderr.decode(errors="replace"), _read(out / "pdus.csv"),
                   _read(out / "commands.csv"), _read(out / "connections.csv"), out)


def decode_json(binary: Path, capture: str | Path, *extra: str) -> list[dict[str, object]]:
    r = run_decoder(binary, ["--json", *extra, str(capture)])
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]


def norm(col: str, value: object) -> object:
    """A cell as a comparable Python value: ints for numbers/hex, str otherwise."""
    if value is None:
        return ""
    text = str(value).strip()
    if text == "":
        return ""
    if col in HEX_COLS:
        return int(text, 0)
    try:
        return int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            return text
        return int(f) if f.is_integer() else f


def row_at(df: pd.DataFrame, d: str, seq: int) -> dict[str, str] | None:
    hit = df[(df["dir"] == d) & (df["tcp_seq"].astype("int64") == seq)]
    if len(hit) == 0:
        return None
    assert len(hit) == 1, f"{len(hit)} rows for {d} seq {seq}:\n{hit.to_string()}"
    return hit.iloc[0].to_dict()


def mismatches(row: dict[str, str], exp: dict[str, object]) -> list[str]:
    out = []
    for k, v in exp.items():
        assert k in row, f"column {k} missing from pdus.csv"
        got = norm(k, row[k])
        want = v if isinstance(v, str) else int(v)  # type: ignore[call-overload]
        if got != want:
            out.append(f"{k}: got {row[k]!r} want {v!r}")
    return out


def notes(df: pd.DataFrame, col: str = "note") -> str:
    if df.empty or col not in df.columns:
        return ""
    return " ".join(df[col].tolist())
