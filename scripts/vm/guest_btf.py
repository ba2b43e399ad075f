#!/usr/bin/python3
"""Inside the VM: byte offsets of struct members from the kernel's (module) BTF.

bpftrace 0.17 reads only vmlinux BTF, so structs defined in modules (iscsi_task in libiscsi,
se_cmd in target_core_mod) are unknown to it. This reads them with bpftool and prints
`NAME=VALUE` lines (shell-sourceable): OFF_<struct>_<member>=<bytes>, and for array-or-pointer
members KIND_<struct>_<member>=array|ptr.

    guest_btf.py libiscsi:iscsi_task.hdr scsi_mod:scsi_cmnd.cmnd target_core_mod:se_cmd.tag
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

VMLINUX = "/sys/kernel/btf/vmlinux"


def load(module: str) -> dict[int, dict[str, Any]]:
    cmd = ["bpftool", "-j", "btf", "dump", "file", f"/sys/kernel/btf/{module}"]
    if module != "vmlinux":
        cmd[2:2] = ["-B", VMLINUX]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {t["id"]: t for t in json.loads(out)["types"]}


def find_member(types: dict[int, dict[str, Any]], sid: int, name: str) -> tuple[int, int] | None:
    """(bit offset, type id) of member `name`, looking into anonymous unions/structs too."""
    for m in types[sid].get("members", []):
        if m["name"] == name:
            return m["bits_offset"], m["type_id"]
        if m["name"] in ("", "(anon)") and m["type_id"] in types:
            inner = find_member(types, m["type_id"], name)
            if inner is not None:
                return m["bits_offset"] + inner[0], inner[1]
    return None


def strip(types: dict[int, dict[str, Any]], tid: int) -> str:
    """Kind of a type after typedefs and qualifiers (ARRAY, PTR, INT, ...), or "?" when the
    type lives in vmlinux's BTF (module dumps hold only their own types)."""
    for _ in range(16):
        if tid not in types:
            return "?"
        kind = types[tid]["kind"]
        if kind not in ("TYPEDEF", "CONST", "VOLATILE", "RESTRICT"):
            return kind
        tid = types[tid]["type_id"]
    return "?"


def member_span(types: dict[int, dict[str, Any]], sid: int, bit_off: int) -> int:
    """Bits from a member to the next one (or the struct's end)."""
    later = [m["bits_offset"] for m in types[sid].get("members", [])
             if m["bits_offset"] > bit_off]
    return (min(later) if later else types[sid]["size"] * 8) - bit_off


def resolve(spec: str, cache: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    module, path = spec.split(":", 1)
    struct, member = path.split(".", 1)
    for where in (module, "vmlinux"):
        if where not in cache:
            cache[where] = load(where)
        types = cache[where]
        for tid, t in types.items():
            if t["kind"] == "STRUCT" and t.get("name") == struct and t.get("members"):
                hit = find_member(types, tid, member)
                if hit is None:
                    raise KeyError(f"{struct} has no member {member}")
                kind = strip(types, hit[1]).lower()
                if kind == "?":
                    # Shared with vmlinux (looking there costs minutes under TCG): a member
                    # spanning more than 16 bytes is an array, never a pointer.
                    kind = "array" if member_span(types, tid, hit[0]) > 128 else "ptr"
                return [f"OFF_{struct}_{member}={hit[0] // 8}",
                        f"KIND_{struct}_{member}={'array' if kind == 'array' else 'ptr'}"]
    raise KeyError(f"struct {struct} not found in {module} or vmlinux BTF")


def main(argv: list[str]) -> int:
    cache: dict[str, dict[int, dict[str, Any]]] = {}
    try:
        for spec in argv:
            print("\n".join(resolve(spec, cache)))
    except (KeyError, ValueError, subprocess.CalledProcessError) as exc:
        print(f"guest_btf: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
