"""The tshark side of the decoder's comparison (tshark_pdus.chain_seqs): each PDU tshark shows
gets the TCP sequence number it starts at, however the segments arrived."""

from __future__ import annotations

from tshark_pdus import TPdu, chain_seqs

CONN = "10.77.0.1:55942-10.77.0.2:3260"


def _data_in(frame: int, frame_seq: int, frame_len: int, statsn: int) -> TPdu:
    return TPdu(frame, CONN, "t2i", frame_seq, frame_len,
                fields={"opcode": 0x25, "dsl": 4096, "statsn": statsn})


def test_pdus_queued_out_of_order_are_placed_where_their_bytes_are() -> None:
    """A CI run's capture (veth reordering under load): frame 16049 filled the gap in front of
    a 4144-byte Data-In whose bytes had come already, and tshark showed both the PDU it
    completed and that queued one in it; the next PDU came in frame 16050, past its end."""
    pdus = [_data_in(16041, 3746427951, 1248, 3127),  # ends where its frame ends
            _data_in(16049, 3746432295, 1048, 3128),
            _data_in(16049, 3746432295, 1048, 3129),
            _data_in(16050, 3746440583, 1048, 3130)]
    assert chain_seqs(pdus) == []
    assert [p.tcp_seq for p in pdus] == [3746425055, 3746429199, 3746433343, 3746437487]


def test_a_pdu_away_from_its_frame_breaks_the_chain() -> None:
    pdus = [_data_in(1, 1000, 4144, 1), _data_in(2, 900_000_000, 100, 2)]
    assert len(chain_seqs(pdus)) == 1
