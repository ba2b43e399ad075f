"""freed.prompt_release: mimalloc's settings set before pyarrow loads, never over the
caller's own, and not at all once pyarrow is loaded (too late to take effect)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = ("from istrace.system import freed; {pre}freed.prompt_release(); import os; "
         "print(os.environ.get('MIMALLOC_PURGE_DELAY'), "
         "os.environ.get('MIMALLOC_ARENA_EAGER_COMMIT'))")


def _run(pre: str = "", **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    r = subprocess.run([sys.executable, "-c", PROBE.format(pre=pre)], env=clean | env,
                       capture_output=True, text=True, check=True, timeout=60)
    return r.stdout.strip()


def test_set_before_pyarrow_loads() -> None:
    assert _run() == "0 0"


def test_the_callers_setting_is_kept() -> None:
    assert _run(MIMALLOC_PURGE_DELAY="250") == "250 0"


def test_nothing_once_pyarrow_is_loaded() -> None:
    assert _run(pre="import pyarrow; ") == "None None"


def test_the_command_line_does_it_before_the_subcommand_loads() -> None:
    # the value seen when `istrace merge` imports its module (which imports pyarrow)
    code = ("import importlib, os; from istrace.cli import main; real = importlib.import_module; "
            "importlib.import_module = lambda n, *a: (print('seen', os.environ.get("
            "'MIMALLOC_PURGE_DELAY')), real(n, *a))[1]; main.main(['merge', '--help'])")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    r = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "seen 0"
