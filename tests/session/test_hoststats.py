"""The host sampler: ss -ti parsed field by field (lines recorded on this machine), and a real
capture on the testbed whose hoststats show the target's socket sending and tgtd's CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from istrace.capture.hoststats import load_hoststats
from istrace.capture.load import load_capture
from istrace.session.sampler import parse_ss

# `ss -tinmH state established` on the target during a 256k qd4 read at 5 ms one-way delay.
TARGET = """\
0      1048768 10.77.0.2:3260 10.77.0.1:49630
\t skmem:(r0,rb131072,t0,tb11570688,f320,w1068736,o0,bl0,d0) bbr wscale:11,11 rto:212 \
rtt:11.786/0.118 ato:40 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:2097 \
bytes_sent:125329764 bytes_retrans:1448 bytes_acked:124279652 bytes_received:23564 \
segs_out:87011 segs_in:21270 data_segs_out:86984 data_segs_in:479 \
bbr:(bw:793564552bps,mrtt:9.814,pacing_gain:2.88672,cwnd_gain:2.88672) send 2061059562bps \
lastrcv:4 lastack:4 pacing_rate 2267889704bps delivery_rate 793564824bps delivered:86258 \
app_limited busy:1828ms rwnd_limited:12ms(0.7%) unacked:727 retrans:0/1 dsack_dups:1 \
reordering:46 reord_seen:126 rcv_space:14480 rcv_ssthresh:64088 notsent:104 minrtt:9.814 \
snd_wnd:3325952
"""
# The initiator's socket of the same run: a receiver, no busy clock at all.
INITIATOR = """\
0      0      10.77.0.1:49630 10.77.0.2:3260
\t skmem:(r0,rb33554432,t0,tb46080,f0,w0,o0,bl0,d0) cubic wscale:11,11 rto:211 rtt:10.5/0.2 \
ato:40 mss:536 cwnd:10 bytes_sent:23564 bytes_acked:23565 bytes_received:124279652 \
rcv_space:2981304 rcv_ssthresh:16777216 minrtt:10.1 snd_wnd:65536
"""


def test_parse_ss_target_socket():
    (s,) = parse_ss(TARGET, 3260)
    assert s["conn"] == "10.77.0.1:49630-10.77.0.2:3260"  # initiator first
    assert (s["recv_q"], s["send_q"]) == (0, 1048768)
    assert s["busy_us"] == 1_828_000 and s["rwnd_limited_us"] == 12_000
    assert s["sndbuf_limited_us"] == 0  # not printed: it never ran
    assert (s["cwnd"], s["unacked"], s["notsent"]) == (2097, 727, 104)
    assert s["rtt_ms"] == 11.786 and s["rttvar_ms"] == 0.118 and s["minrtt_ms"] == 9.814
    assert s["sndbuf_bytes"] == 11570688 and s["wmem_queued"] == 1068736
    assert s["rcvbuf_bytes"] == 131072 and s["wmem_alloc"] == 0
    assert s["pacing_rate_bps"] == 2267889704 and s["delivery_rate_bps"] == 793564824
    assert s["bytes_acked"] == 124279652 and s["retrans_total"] == 1
    assert s["snd_wnd"] == 3325952 and s["cc"] == "bbr" and s["app_limited"]


def test_parse_ss_receiver_socket_has_no_clocks():
    (s,) = parse_ss(INITIATOR, 3260)
    assert s["conn"] == "10.77.0.1:49630-10.77.0.2:3260"
    assert "busy_us" not in s and "rwnd_limited_us" not in s
    assert s["cc"] == "cubic" and not s["app_limited"] and s["bytes_received"] == 124279652
    assert parse_ss("", 3260) == [] and parse_ss("garbage\n", 3260) == []


def test_cut_last_line_is_skipped(tmp_path, capsys):
    rec = {"ts_ns": 1, "host": "target", "user_hz": 100, "cpus": {"cpu": [1] * 8},
           "sockets": parse_ss(TARGET, 3260), "procs": {}}
    (tmp_path / "hoststats-target.jsonl").write_text(json.dumps(rec) + "\n" + '{"ts_ns": 2, "ho')
    sock, cpu = load_hoststats(tmp_path)
    assert len(sock) == 1 and cpu is None
    assert "unreadable line skipped" in capsys.readouterr().err


def _istrace(*args):
    return subprocess.run([sys.executable, "-m", "istrace.cli.main", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")
def test_capture_samples_tcp_info_and_cpu(tmp_path):
    out = tmp_path / "cap"
    r = _istrace("capture", "--name", f"hs{os.getpid() % 10000}", "--delay", "2ms",
                 "--workload", "gen --size 1M --queue-depth 4 --time 3", "--out", str(out),
                 "--no-probes")
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads((out / "meta.json").read_text())
    hs = meta["hoststats"]
    assert hs["status"] == "ok" and not hs["errors"] and hs["samples"] >= 4
    cap = load_capture(out, decode=False)
    s = cap.sockstats
    tgt = s[(s["host"] == "target") & s["busy_us"].notna()].sort_values("ts_ns")
    assert len(tgt) >= 3
    # The target sent ~2 s of reads: its socket's busy clock and acknowledged bytes grow.
    assert tgt["busy_us"].iloc[-1] > tgt["busy_us"].iloc[0]
    assert tgt["bytes_acked"].iloc[-1] > 50e6
    assert set(tgt["conn"]) == set(s[s["host"] == "initiator"]["conn"])
    # Samples about every 500 ms (the default period), CPU of tgtd and the workload measured.
    gaps = tgt["ts_ns"].diff().dropna() / 1e6
    assert 400 < gaps.median() < 700
    c = cap.cpu
    assert c[c["what"] == "tgtd"]["busy"].max() > 0
    assert c[c["what"] == "workload"]["busy"].max() > 0
    assert ((c["what"] == "cpu") & (c["busy"] > 0)).any()
    assert "host samples" not in " ".join(cap.missing)


def test_sample_ms_zero_turns_it_off(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root")
    out = tmp_path / "off"
    r = _istrace("capture", "--name", f"hz{os.getpid() % 10000}", "--workload",
                 "gen --size 64k --count 4", "--out", str(out), "--no-probes", "--sample-ms", "0")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(Path(out).glob("hoststats-*"))
    assert json.loads((out / "meta.json").read_text())["hoststats"]["status"].startswith("off")
