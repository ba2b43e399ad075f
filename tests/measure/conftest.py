"""The synthetic capture of known truth the measures are checked on (synth.make_capture)."""

import pytest
import synth
from istrace.track.of_capture import load_tracked


@pytest.fixture(scope="module")
def cap1(module_tmp):
    d = module_tmp("qd1")
    truth = synth.make_capture(d, n_cmds=64, qd=1)
    return load_tracked(d), truth
