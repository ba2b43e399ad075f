"""Thin wrappers over `ip netns`, `ip link` and friends, with one-line errors."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

# Namespaces made from this one get a TCP hash table of this many buckets (Linux >= 6.1).
CHILD_EHASH = Path("/proc/sys/net/ipv4/tcp_child_ehash_entries")
PRIVATE_EHASH_BUCKETS = 1024


class NetError(RuntimeError):
    """A network setup command failed; the message is the command and its stderr."""


def sh(cmd: Sequence[str], check: bool = True, ns: str | None = None) -> str:
    """Run `cmd` (inside netns `ns` when given); return stdout; raise NetError on failure."""
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    proc = subprocess.run(full, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetError(f"`{' '.join(full)}` failed: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def in_ns(ns: str, cmd: Sequence[str] | str) -> list[str]:
    """The argv that runs `cmd` inside `ns` (a string runs through sh -c)."""
    argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    return ["ip", "netns", "exec", ns, *argv]


def ns_exists(ns: str) -> bool:
    out = sh(["ip", "netns", "list"], check=False)
    return any(line.split()[0] == ns for line in out.splitlines() if line.strip())


@contextlib.contextmanager
def _private_ehash() -> Iterator[None]:
    """Namespaces created inside get their own small TCP hash table. A socket dump (ss,
    inet_diag) walks every bucket of the table it sees: a host-sized table makes every `ss`
    slow, a small one keeps sampling the iSCSI sockets every 100 ms cheap. The host's own
    setting is put back at once."""
    try:
        old = CHILD_EHASH.read_text().strip()
    except OSError:
        yield
        return
    changed = False
    if old == "0":
        try:
            CHILD_EHASH.write_text(str(PRIVATE_EHASH_BUCKETS))
            changed = True
        except OSError:
            pass
    try:
        yield
    finally:
        if changed:
            with contextlib.suppress(OSError):
                CHILD_EHASH.write_text(old)


def ns_add(ns: str) -> None:
    with _private_ehash():
        sh(["ip", "netns", "add", ns])
    sh(["ip", "link", "set", "lo", "up"], ns=ns)


def ns_pids(ns: str) -> list[int]:
    out = sh(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def ns_del(ns: str) -> None:
    sh(["ip", "netns", "del", ns], check=False)


def link_exists(dev: str, ns: str | None = None) -> bool:
    full = (["ip", "netns", "exec", ns] if ns else []) + ["ip", "link", "show", "dev", dev]
    return subprocess.run(full, capture_output=True, timeout=30).returncode == 0


def veth(a: str, ns_a: str, b: str, ns_b: str) -> None:
    """A veth pair with end `a` in `ns_a` and end `b` in `ns_b`, both up."""
    sh(["ip", "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b])
    sh(["ip", "link", "set", a, "up"], ns=ns_a)
    sh(["ip", "link", "set", b, "up"], ns=ns_b)


def offloads_off(dev: str, ns: str) -> None:
    """Segmentation offloads off so captured segments are wire-sized, as on a real NIC path."""
    sh(["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"], ns=ns, check=False)


def sysctl(ns: str, key: str, value: str) -> None:
    sh(["sysctl", "-q", "-w", f"{key}={value}"], ns=ns)
