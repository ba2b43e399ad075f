import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def istrace():
    """Run `istrace ARGS` from this tree (no install needed); returns CompletedProcess."""
    def run(*args, timeout=120, **kw):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            os.path.join(REPO, p) for p in ("scripts", "decoder", "viz", "bpf")))
        return subprocess.run([sys.executable, "-m", "istrace_cli.main", *args], env=env,
                              capture_output=True, text=True, timeout=timeout, **kw)
    return run

