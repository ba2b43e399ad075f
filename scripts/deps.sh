#!/usr/bin/env bash
# Installs every system and Python dependency istrace needs, idempotently.
# Safe on a fresh Debian 12 machine as root; quick when everything is already there.
set -euo pipefail

APT_PACKAGES=(
  build-essential clang llvm lld pkg-config
  libpcap-dev libbpf-dev bpftool bpftrace libelf-dev zlib1g-dev linux-libc-dev
  systemtap-sdt-dev libclang-rt-14-dev afl++ valgrind
  tcpdump tshark tgt libiscsi-bin libiscsi-dev
  iproute2 ethtool iputils-ping iperf3 psmisc procps jq time
  chromium
)
HERE=$(cd "$(dirname "$0")" && pwd)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing apt packages: ${missing[*]}"
  [ "$(id -u)" = 0 ] || { echo "deps: must run as root to install ${missing[*]}" >&2; exit 1; }
  # wireshark-common asks whether non-root users may capture; answer it up front.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "deps: installing python3-pip"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip python3-venv
fi
# Debian's own python3 refuses system-wide pip installs (PEP 668); this tool owns the machine.
PIP_FLAGS=()
if "$PY" -c 'import sys,sysconfig,os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"),"EXTERNALLY-MANAGED")) else 1)'; then
  PIP_FLAGS+=(--break-system-packages)
fi
# Pinned (scripts/requirements.txt, scripts/constraints.txt): a fresh machine gets the versions
# the tests passed with. pip leaves satisfied pins alone without asking the index.
if ! "$PY" -m pip install -q "${PIP_FLAGS[@]}" -r "$HERE/requirements.txt" -c "$HERE/constraints.txt" \
     2>"${TMPDIR:-/tmp}/istrace-deps-pip.$$"; then
  cat "${TMPDIR:-/tmp}/istrace-deps-pip.$$" >&2; rm -f "${TMPDIR:-/tmp}/istrace-deps-pip.$$"
  echo "deps: pip could not install scripts/requirements.txt" >&2; exit 1
fi
rm -f "${TMPDIR:-/tmp}/istrace-deps-pip.$$"
# Opt-in, `deps.sh --vm` (istrace.testbed.vm runs it on first use): the full-kernel VM
# testbed's QEMU, stock kernel, LIO library, open-iscsi and virtme-ng. Heavy, so never by default.
VM_APT_PACKAGES=(qemu-system-x86 linux-image-amd64 busybox-static open-iscsi python3-rtslib-fb fio kmod)
if [ "${1:-}" = "--vm" ]; then
  vm_missing=()
  for p in "${VM_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || vm_missing+=("$p")
  done
  if ((${#vm_missing[@]})); then
    echo "deps: installing VM packages: ${vm_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${vm_missing[@]}"
  fi
  command -v vng >/dev/null || "$PY" -m pip install -q "${PIP_FLAGS[@]}" virtme-ng
fi
echo "deps: all present"
