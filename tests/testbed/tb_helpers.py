"""Helpers shared by the testbed tests (a unique module name: other parts have conftests)."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def istrace_argv(*args):
    """argv and env that run `istrace ARGS` from this tree, without an install."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        os.path.join(REPO, p) for p in ("scripts", "decoder", "viz", "bpf")))
    return [sys.executable, "-m", "istrace.cli.main", *args], env


def leftovers(name):
    """Everything of testbed `name` still on the machine: namespaces, links, processes."""
    out = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += [line.split()[0] for line in ns.splitlines() if f"ist-{name}-" in line]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    out += [line for line in links.splitlines() if f"ist{name}-" in line]
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    out += [line for line in ps.splitlines()
            if any(k in line for k in (f"ist-{name}-", f"/istrace/{name}/", f"ist{name}-",
                                       f"org.istrace:{name}"))
            and "ps -eo" not in line]
    return out
