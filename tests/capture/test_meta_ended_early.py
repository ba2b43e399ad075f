"""meta.json's `ended_early` (written by `istrace capture` when its disk ran low), as the meta
module gives it to the analyses."""

from istrace.capture import meta as capture_meta

EARLY = {"reason": "disk", "free_bytes": 21_372_928, "reserve_bytes": 22_000_000,
         "at_s": 5.956, "dir": "/mnt/cap"}


def test_the_meta_module_reads_ended_early() -> None:
    assert capture_meta.ended_early({}) is None
    assert capture_meta.ended_early({"ended_early": None}) is None
    assert capture_meta.ended_early({"ended_early": EARLY}) == EARLY
    # a hand-edited or older entry still says the capture ended early, without bad numbers
    assert capture_meta.ended_early({"ended_early": "disk"}) == {"reason": "disk"}
    assert capture_meta.ended_early({"ended_early": {"at_s": "late", "free_bytes": True}}) \
        == {"reason": "unknown"}
