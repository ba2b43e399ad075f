"""A deliberately tiny iSCSI target on loopback that logs in, answers READ CAPACITY(16), and then
misbehaves in one chosen way, so istrace-gen's handling of faults tgtd never produces can be
tested (Reject, sense data, out-of-order Data-In, Async logout request, bad digests)."""

from __future__ import annotations

import random
import socket
import struct
import threading

BLOCKS = 2048


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("initiator closed")
        buf += chunk
    return buf


def _pdu(opcode: int, flags: int, itt: int, data: bytes = b"", **fields: int) -> bytes:
    bhs = bytearray(48)
    bhs[0] = opcode
    bhs[1] = flags
    bhs[5:8] = len(data).to_bytes(3, "big")
    struct.pack_into(">I", bhs, 16, itt)
    for off, val in fields.items():  # byte offset "b20" -> 32-bit value
        struct.pack_into(">I", bhs, int(off[1:]), val)
    pad = b"\0" * (-len(data) % 4)
    return bytes(bhs) + data + pad


class FakeTarget:
    """Serves one connection at a time until close(); `mode` picks the misbehaviour."""

    def __init__(self, mode: str, seed: int = 0) -> None:
        self.mode = mode
        self.rng = random.Random(seed)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            try:
                self._session(conn)
            except (ConnectionError, OSError):
                pass
            finally:
                conn.close()

    def _read_pdu(self, conn: socket.socket) -> tuple[bytes, bytes]:
        bhs = _recv_exact(conn, 48)
        dsl = int.from_bytes(bhs[5:8], "big")
        data = _recv_exact(conn, dsl + (-dsl % 4))[:dsl]
        return bhs, data

    def _session(self, conn: socket.socket) -> None:
        statsn = 1
        while True:
            bhs, data = self._read_pdu(conn)
            op, itt = bhs[0] & 0x3F, struct.unpack_from(">I", bhs, 16)[0]
            cmdsn = struct.unpack_from(">I", bhs, 24)[0]
            sn = {"b24": statsn, "b28": cmdsn + 1, "b32": cmdsn + 64}
            if op == 0x03 and self.mode == "fuzzlogin":  # nonsense instead of a login answer
                for _ in range(self.rng.randint(1, 4)):
                    conn.sendall(self._random_pdu(itt, sn, login=True))
                return
            if op == 0x03:  # Login: accept whatever stage was asked for
                csg, nsg = (bhs[1] >> 2) & 3, bhs[1] & 3
                if csg == 0:
                    keys = b"AuthMethod=None\0"
                elif self.mode == "refuse":
                    conn.sendall(_pdu(0x23, 0, itt, b"", **sn, b36=0x02030000))
                    return
                else:
                    keys = (b"HeaderDigest=None\0DataDigest=None\0MaxBurstLength=262144\0"
                            b"FirstBurstLength=65536\0ImmediateData=Yes\0InitialR2T=Yes\0"
                            b"MaxOutstandingR2T=1\0ErrorRecoveryLevel=0\0"
                            b"MaxRecvDataSegmentLength=65536\0")
                flags = 0x80 | (csg << 2) | nsg
                conn.sendall(_pdu(0x23, flags, itt, keys, **{**sn, "b28": cmdsn,
                                                             "b32": cmdsn + 64}))
                statsn += 1
            elif op == 0x01:
                cdb = bhs[32:48]
                if cdb[0] == 0x9E:  # READ CAPACITY(16)
                    cap = struct.pack(">QI", BLOCKS - 1, 512) + bytes(20)
                    conn.sendall(_pdu(0x25, 0x81, itt, cap, **sn, b36=0, b40=0))
                    statsn += 1
                    continue
                self._misbehave(conn, bhs, itt, sn)
                statsn += 1
            elif op == 0x06:  # Logout
                conn.sendall(_pdu(0x26, 0x80, itt, b"", **sn))
                return

    def _misbehave(self, conn: socket.socket, bhs: bytes, itt: int, sn: dict[str, int]) -> None:
        edtl = struct.unpack_from(">I", bhs, 20)[0]
        if self.mode == "reject":  # reason 0x09, the rejected header as data
            rej = bytearray(_pdu(0x3F, 0x80, 0xFFFFFFFF, bhs, **sn))
            rej[2] = 0x09
            conn.sendall(bytes(rej))
        elif self.mode == "sense":  # MEDIUM ERROR / UNRECOVERED READ ERROR, fixed format
            sense = bytes([0x70, 0, 0x03, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x11, 0x00, 0, 0, 0, 0])
            rsp = bytearray(_pdu(0x21, 0x80, itt, struct.pack(">H", len(sense)) + sense, **sn))
            rsp[3] = 0x02
            conn.sendall(bytes(rsp))
        elif self.mode == "datasn":  # first Data-In claims DataSN 1
            conn.sendall(_pdu(0x25, 0x00, itt, bytes(min(edtl, 512)), **sn, b36=1, b40=0))
        elif self.mode == "async":  # target asks for logout
            msg = bytearray(_pdu(0x32, 0x80, 0xFFFFFFFF, b"", **sn))
            msg[36] = 1
            conn.sendall(bytes(msg))
        elif self.mode == "chatty":  # pings (no reply wanted) but never completes the read
            for _ in range(75):
                if self._stop.wait(0.2):
                    return
                conn.sendall(_pdu(0x20, 0x80, 0xFFFFFFFF, b"", **{**sn, "b20": 0xFFFFFFFF}))
        elif self.mode == "fuzz":  # plausible-looking nonsense, then hang up
            for _ in range(self.rng.randint(1, 6)):
                conn.sendall(self._random_pdu(itt, sn))
        elif self.mode == "partsense":  # half the data, a pause, then CHECK CONDITION
            conn.sendall(_pdu(0x25, 0x00, itt, bytes(edtl // 2), **sn, b36=0, b40=0))
            if self._stop.wait(0.3):
                return
            sense = bytes([0x70, 0, 0x03, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x11, 0x00, 0, 0, 0, 0])
            rsp = bytearray(_pdu(0x21, 0x80, itt, struct.pack(">H", len(sense)) + sense, **sn))
            rsp[3] = 0x02
            conn.sendall(bytes(rsp))
        elif self.mode == "good":
            data = bytes(edtl)
            conn.sendall(_pdu(0x25, 0x81, itt, data, **sn, b36=0, b40=0))

    def _random_pdu(self, itt: int, sn: dict[str, int], login: bool = False) -> bytes:
        r = self.rng
        op = r.choice([0x20, 0x21, 0x22, 0x24, 0x25, 0x26, 0x31, 0x32, 0x3F, r.randrange(64)])
        dsl = r.choice([0, 1, 3, 48, 512, 4096, 70000, r.randrange(1 << 17)])
        if login:
            op = 0x23 if r.random() < 0.7 else op
            keys = [b"AuthMethod=None", b"AuthMethod=CHAP", b"HeaderDigest=CRC32C",
                    b"MaxRecvDataSegmentLength=0", b"ErrorRecoveryLevel=2", b"=", b"X",
                    b"TargetAddress=1.2.3.4", b"MaxBurstLength=99999999999"]
            text = b"\0".join(r.choice(keys) for _ in range(r.randint(0, 5)))
            text += b"\0" if r.random() < 0.7 else b""
            dsl = len(text)
        fields = {**sn}
        for off in (20, 24, 28, 32, 36, 40, 44):
            if r.random() < 0.5:
                fields[f"b{off}"] = r.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, r.randrange(1 << 32)])
        tag = itt if r.random() < 0.7 else r.randrange(1 << 32)
        data = text if login else bytes(r.randrange(256) for _ in range(dsl))
        pdu = bytearray(_pdu(op, r.randrange(256), tag, data, **fields))
        pdu[2], pdu[3] = r.randrange(256), r.randrange(256)
        if r.random() < 0.2:
            pdu[4] = r.randrange(256)  # an AHS length the data does not match
        if r.random() < 0.2:  # a truncated PDU
            pdu = pdu[: r.randrange(len(pdu))]
        return bytes(pdu)
