"""Helpers shared by the testbed tests (a unique module name: other parts have conftests)."""

import subprocess


def leftovers(name):
    """Everything of testbed `name` still on the machine: namespaces, links, processes."""
    out = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += [line.split()[0] for line in ns.splitlines() if f"ist-{name}-" in line]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    out += [line for line in links.splitlines() if f"ist{name}-" in line]
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    out += [line for line in ps.splitlines()
            if (f"ist-{name}-" in line or f"/istrace/{name}/" in line or f"ist{name}-" in line)
            and "ps -eo" not in line]
    return out
