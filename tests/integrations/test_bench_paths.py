"""``bench_store.py --paths`` / ``--pieces`` (issue #42) run end to end on a tiny fleet: every
row measured against its floor, the pieces restored afterwards, the chart written."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bench_store
from redis_session import codec
from redis_session._transport import fast as _fast
from redis_session._transport import url as _url
from tests.support.servers import Server

TINY = ["--workers", "2", "--sessions", "6", "--messages", "40", "--turns", "30",
        "--fleet-warmup", "30", "--get-rounds", "10", "--rounds", "40"]  # fmt: skip


@pytest.mark.slow
def test_both_paths_and_each_piece_are_measured_and_restored(
    redis_server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (_fast.DECODE, _fast.RECLASS, codec.READ_TZ, _url.sync_replies)
    chart = tmp_path / "figures.svg"
    assert (
        bench_store.main(["--url", redis_server.url, "--paths", "--chart", str(chart), *TINY]) == 0
    )
    out = capsys.readouterr().out
    for row in ("cold get (1,000 mixed), fast", "cold get (1,000 mixed), public",
                "append, own client, public vs the raw script",
                "get_history(last=20) of 10,000, from_url, fast"):  # fmt: skip
        assert row in out, row
    svg = chart.read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "fast path" in svg and "public path" in svg
    assert bench_store.main(["--url", redis_server.url, "--pieces", *TINY]) == 0
    out = capsys.readouterr().out
    assert "fleet loop 2x6x40, decoder off" in out and "direct requests off" in out
    assert (_fast.DECODE, _fast.RECLASS, codec.READ_TZ, _url.sync_replies) == before
