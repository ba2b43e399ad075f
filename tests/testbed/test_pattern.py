import struct

from istrace.testbed import pattern


def test_expected_words_hold_their_index():
    block7 = pattern.expected(7 * 512, 512)
    words = struct.unpack("<64Q", block7)
    assert words == tuple(range(7 * 64, 8 * 64))


def test_unaligned_slices_agree_with_aligned():
    whole = pattern.expected(0, 4096)
    assert pattern.expected(13, 1000) == whole[13:1013]
    assert pattern.expected(5, 0) == b""


def test_check_finds_first_bad_byte():
    data = bytearray(pattern.expected(1024, 512))
    assert pattern.check(1024, bytes(data)) is None
    data[100] ^= 0xFF
    data[300] ^= 0xFF
    assert pattern.check(1024, bytes(data)) == 1124
    # a block from the wrong place is caught at its first byte that differs
    assert pattern.check(0, pattern.expected(512, 512)) is not None


def test_fill_writes_exact_size_and_pattern(tmp_path):
    path = tmp_path / "lun.img"
    size = (9 << 20) + 13  # crosses the chunk size and ends mid-word
    pattern.fill(path, size)
    raw = path.read_bytes()
    assert len(raw) == size
    assert pattern.check(0, raw) is None
    assert raw[-13:] == pattern.expected(size - 13, 13)
