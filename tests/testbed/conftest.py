import subprocess

import pytest
from tb_helpers import istrace_argv


@pytest.fixture
def istrace():
    """Run `istrace ARGS` from this tree (no install needed); returns CompletedProcess."""
    def run(*args, timeout=120, **kw):
        argv, env = istrace_argv(*args)
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                              **kw)
    return run
