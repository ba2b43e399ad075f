"""The connection key `conn` (docs/schema.md): "<initiator ip>:<port>-<target ip>:<port>",
IPv6 addresses in brackets. The one Python spelling; the C decoder (decoder/session.c) and
the probe loader (bpf/probe_event.c) write the same text into their tables.

Addresses are kept as the text they came in (inet_ntop's RFC 5952 form in the decoder's
tables): normalising them here could make a key differ from the one the C side wrote.
"""

from __future__ import annotations

import re

_ENDPOINT = r"(\[[^\]]+\]|[^\[\]:-]+):(\d+)"
_CONN_RX = re.compile(rf"^{_ENDPOINT}-{_ENDPOINT}$")
_ENDPOINT_RX = re.compile(rf"^{_ENDPOINT}$")


def endpoint(ip: str, port: int | str) -> str:
    """`ip:port`, an IPv6 address in brackets (one already bracketed is left as it is)."""
    ip = str(ip)
    if ":" in ip and not ip.startswith("["):
        ip = f"[{ip}]"
    return f"{ip}:{int(port)}"


def conn_key(ini_ip: str, ini_port: int | str, tgt_ip: str, tgt_port: int | str) -> str:
    """The connection key, initiator end first."""
    return f"{endpoint(ini_ip, ini_port)}-{endpoint(tgt_ip, tgt_port)}"


def parse_endpoint(text: str) -> tuple[str, int]:
    """`ip:port` or `[ip6]:port` -> (ip without brackets, port); ValueError otherwise."""
    m = _ENDPOINT_RX.match(text.strip())
    if not m:
        raise ValueError(f"not an ip:port endpoint: {text!r}")
    return m.group(1).strip("[]"), int(m.group(2))


def parse_conn(key: str) -> tuple[str, int, str, int]:
    """A connection key -> (initiator ip, port, target ip, port), addresses without
    brackets; ValueError when the text is not a key."""
    m = _CONN_RX.match(key.strip())
    if not m:
        raise ValueError(f"not a connection key: {key!r}")
    return m.group(1).strip("[]"), int(m.group(2)), m.group(3).strip("[]"), int(m.group(4))
