"""The shared Testbed API against a real tgtd: up, iSCSI discovery and login, down."""

import os

from istrace.testbed import pattern
from istrace.testbed.namespaces import Testbed, TestbedConfig
from tb_helpers import leftovers


def test_up_discover_login_down():
    cfg = TestbedConfig(name="tbapi", lun_mb=8)
    with Testbed(cfg) as tb:
        assert tb.portal == f"{tb.tgt_ip}:3260"
        ls = tb.run_ini(["iscsi-ls", "-s", f"iscsi://{tb.portal}"], capture_output=True,
                        timeout=30)
        assert ls.returncode == 0, ls.stderr
        assert tb.iqn in ls.stdout and "Lun:1" in ls.stdout
        cap = tb.run_ini(["iscsi-readcapacity16", f"iscsi://{tb.portal}/{tb.iqn}/1"],
                         capture_output=True, timeout=30)
        assert "Total size:8388608" in cap.stdout, cap.stdout + cap.stderr
        assert os.path.getsize(tb.lun_path) == 8 << 20
        with open(tb.lun_path, "rb") as f:
            f.seek(4 << 20)
            assert pattern.check(4 << 20, f.read(65536)) is None
        # offloads off: wire-sized segments on both ends
        k = tb.run_ini(["ethtool", "-k", tb.ini_dev], capture_output=True).stdout
        assert "tcp-segmentation-offload: off" in k
        assert "generic-receive-offload: off" in k
    assert leftovers("tbapi") == []
    assert not os.path.exists(tb.lun_path)


def test_chap_one_way():
    cfg = TestbedConfig(name="tbchap", lun_mb=1, chap_user="ini", chap_secret="secret123456")
    with Testbed(cfg) as tb:
        url = f"iscsi://{tb.portal}/{tb.iqn}/1"
        bad = tb.run_ini(["iscsi-readcapacity16", url], capture_output=True, timeout=30)
        assert bad.returncode != 0
        good = tb.run_ini(["iscsi-readcapacity16",
                           f"iscsi://ini%secret123456@{tb.portal}/{tb.iqn}/1"],
                          capture_output=True, timeout=30)
        assert good.returncode == 0, good.stderr
    assert leftovers("tbchap") == []


def test_cli_up_status_down(istrace):
    up = istrace("testbed", "up", "--name", "tbcli", "--lun-mb", "2", "--txqueuelen", "256",
                 "--nic-rate", "500mbit")
    try:
        assert up.returncode == 0, up.stderr
        st = istrace("testbed", "status", "--name", "tbcli")
        assert '"ready": true' in st.stdout and "tgtd" in st.stdout
        q = os.popen("ip netns exec ist-tbcli-i tc qdisc show dev isttbcli-i").read()
        assert "pfifo" in q and "limit 256p" in q and "htb" in q
        c = os.popen("ip netns exec ist-tbcli-t tc class show dev isttbcli-t").read()
        assert "rate 500Mbit" in c, c
    finally:
        down = istrace("testbed", "down", "--name", "tbcli")
    assert down.returncode == 0, down.stderr
    assert leftovers("tbcli") == []


def test_chap_mutual():
    cfg = TestbedConfig(name="tbmch", lun_mb=1, chap_user="ini", chap_secret="secret123456",
                        chap_mutual_user="tgt", chap_mutual_secret="tsecret654321")
    with Testbed(cfg) as tb:
        url = f"iscsi://ini%secret123456@{tb.portal}/{tb.iqn}/1"

        def login(query):
            return tb.run_ini(["iscsi-readcapacity16", url + query], capture_output=True,
                              timeout=30)
        ok = login("?target_user=tgt&target_password=tsecret654321")
        assert ok.returncode == 0, ok.stderr
        # the initiator checks the target's answer: a wrong target secret fails the login
        bad = login("?target_user=tgt&target_password=wrongwrong12")
        assert bad.returncode != 0 and "CHAP" in bad.stderr
    assert leftovers("tbmch") == []


def test_several_targets_and_a_second_lun():
    cfg = TestbedConfig(name="tbmt", lun_mb=2, lun2_mb=1, targets=3)
    with Testbed(cfg) as tb:
        assert tb.iqns == [tb.iqn, f"{tb.iqn}.t2", f"{tb.iqn}.t3"]
        ls = tb.run_ini(["iscsi-ls", "-s", f"iscsi://{tb.portal}"], capture_output=True,
                        timeout=30)
        assert all(f"Target:{iqn} " in ls.stdout for iqn in tb.iqns), ls.stdout
        for url, size in ((f"{tb.iqns[2]}/1", 2 << 20), (f"{tb.iqn}/2", 1 << 20)):
            cap = tb.run_ini(["iscsi-readcapacity16", f"iscsi://{tb.portal}/{url}"],
                             capture_output=True, timeout=30)
            assert f"Total size:{size}" in cap.stdout, cap.stdout + cap.stderr
    assert leftovers("tbmt") == []
