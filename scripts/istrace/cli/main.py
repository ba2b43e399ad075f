"""`istrace SUBCOMMAND ...`: dispatches to the module that owns each subcommand.

Each subcommand module exposes `main(argv: list[str]) -> int` and parses its own
arguments, so parts can grow independently and a broken part never breaks the others.
"""

from __future__ import annotations

import importlib
import sys

from istrace.capture.inputerror import InputError
from istrace.cli import VERSION
from istrace.system import freed

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "testbed": ("istrace.cli.testbed", "bring the namespace (or --kernel VM) testbed up/down"),
    "capture": ("istrace.cli.capture", "run a workload and capture both ends at every layer"),
    "decode": ("istrace.cli.decode", "decode a pcap/pcapng into iSCSI PDUs and commands"),
    "merge": ("istrace.cli.merge", "merge both hosts' event streams onto one clock"),
    "probe": ("istrace.cli.probe", "attach the BPF probes and stream events"),
    "track": ("istrace.cli.track", "TCP cwnd/congestion-state time series"),
    "plot": ("istrace.cli.plot", "ladder, tcpseq (tcptrace style), cwnd, cross-layer timeline, "
             "... plots"),
    "gen": ("istrace.cli.gen", "pseudo-initiator: iSCSI READs/WRITEs of any size"),
    "report": ("istrace.cli.report", "diagnosis report (HTML with embedded plots)"),
    "compare": ("istrace.cli.compare", "captures side by side: throughput, latency, verdict, "
                "settings that differ"),
    "reproduce": ("istrace.cli.reproduce", "re-run the studies' experiments"),
}


def _usage() -> str:
    lines = ["usage: istrace SUBCOMMAND [args...] | --version", "", "subcommands:"]
    lines += [f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "`istrace SUBCOMMAND --help` for each one's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"istrace {VERSION}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"istrace: unknown subcommand {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name = COMMANDS[name][0]
    freed.prompt_release()  # before the subcommand loads pyarrow
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            print(f"istrace: `{name}` is not available in this build ({module_name})",
                  file=sys.stderr)
            return 2
        raise
    try:
        return int(module.main(rest) or 0)
    except InputError as exc:  # a damaged input: one line, what and where, no traceback
        print(f"istrace {name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("istrace: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
