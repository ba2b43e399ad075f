"""freed.prompt_release: Arrow's pool chosen before pyarrow loads (the C library's malloc,
whose freed memory give_back returns), never over the caller's own choice, and not at all
once pyarrow is loaded (too late to take effect)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = ("from istrace.system import freed; {pre}freed.prompt_release(); import os; "
         "import pyarrow as pa; print(os.environ.get('ARROW_DEFAULT_MEMORY_POOL'), "
         "pa.default_memory_pool().backend_name)")


def _run(pre: str = "", **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ARROW_")}
    r = subprocess.run([sys.executable, "-c", PROBE.format(pre=pre)], env=clean | env,
                       capture_output=True, text=True, check=True, timeout=60)
    return r.stdout.strip()


def test_set_before_pyarrow_loads() -> None:
    assert _run() == "system system"


def test_the_callers_setting_is_kept() -> None:
    assert _run(ARROW_DEFAULT_MEMORY_POOL="jemalloc") == "jemalloc jemalloc"


def test_nothing_once_pyarrow_is_loaded() -> None:
    assert _run(pre="import pyarrow; ") == "None mimalloc"


def test_the_command_line_does_it_before_the_subcommand_loads() -> None:
    # the value seen when `istrace merge` imports its module (which imports pyarrow)
    code = ("import importlib, os; from istrace.cli import main; real = importlib.import_module; "
            "importlib.import_module = lambda n, *a: (print('seen', os.environ.get("
            "'ARROW_DEFAULT_MEMORY_POOL')), real(n, *a))[1]; main.main(['merge', '--help'])")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ARROW_")}
    r = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "seen system"
