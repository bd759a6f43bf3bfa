"""A benchmark target holds as a ratio or as an absolute cost above the floor, whichever is
looser, so that ``bench --check`` means the same on a fast and on a slow loopback.
"""

from __future__ import annotations

import pytest

from bench.harness.timing import Row


def test_a_row_passes_on_its_ratio_or_on_its_allowance() -> None:
    fast_loopback = Row("append", store=90.0, floor=50.0, target=1.25, allowance=50.0)
    assert fast_loopback.ratio == 1.8 and fast_loopback.verdict == "PASS"  # +40 us
    slow_loopback = Row("append", store=240.0, floor=200.0, target=1.25, allowance=50.0)
    assert slow_loopback.verdict == "PASS"  # 1.2x
    too_slow = Row("append", store=120.0, floor=50.0, target=1.25, allowance=50.0)
    assert too_slow.verdict == "FAIL"  # 2.4x and +70 us
    ratio_only = Row("loop", store=120.0, floor=50.0, target=2.0)
    assert ratio_only.verdict == "FAIL" and ratio_only.target_text == "<= 2.00x"
    assert fast_loopback.target_text == "<= 1.25x or +50 us"
    assert Row("info", store=1.0, floor=1.0, target=None).verdict == "info"
    assert fast_loopback.as_json()["allowance_us"] == 50.0


def test_a_fleet_size_is_workers_sessions_messages() -> None:
    from bench.harness.fleet import parse_size

    assert parse_size("16x400x300") == (16, 400, 300) == parse_size("16X400X300")
    for bad in ("16x400", "0x1x1", "a x1x1", "16x400x300x1", "-1x2x3"):
        with pytest.raises(ValueError, match="WORKERSxSESSIONSxMESSAGES"):
            parse_size(bad)
