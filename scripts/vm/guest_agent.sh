#!/bin/bash
# The VM's init command (vng -e): bring the stack up, then run the host's requests.
# Requests are files RUNDIR/cmd/<id>.sh (written by the host, renamed into place whole);
# each runs once, in order, its output going to <id>.out and its exit code to <id>.rc.
# RUNDIR/cmd/shutdown makes it log out and return, which powers the VM off.
RUNDIR=$1
CONF=$RUNDIR/config.env
# shellcheck disable=SC1090
. "$CONF"
mkdir -p "$RUNDIR/cmd"
if bash "$VMDIR/guest_up.sh" "$CONF" > "$RUNDIR/guest_up.log" 2>&1; then
  echo ok > "$RUNDIR/up.status.tmp"
else
  echo failed > "$RUNDIR/up.status.tmp"
fi
mv "$RUNDIR/up.status.tmp" "$RUNDIR/up.status"
if [ "$(cat "$RUNDIR/up.status")" = ok ]; then
  while [ ! -e "$RUNDIR/cmd/shutdown" ]; do
    for f in "$RUNDIR"/cmd/*.sh; do
      [ -e "$f" ] || continue
      id=${f%.sh}
      mv "$f" "$id.job"
      # The host's deadline (first line "# timeout=N"), so one stuck request cannot wedge
      # the agent: the VM stays reachable for the next request and for shutdown.
      limit=$(sed -n '1s/^# timeout=\([0-9]*\)$/\1/p' "$id.job")
      timeout -k 10 "${limit:-600}" bash "$id.job" > "$id.out" 2>&1
      echo $? > "$id.rc.tmp"
      mv "$id.rc.tmp" "$id.rc"
    done
    sleep 0.3
  done
  iscsiadm -m node --logoutall=all > /dev/null 2>&1 || true
fi
echo "guest_agent: exiting"
