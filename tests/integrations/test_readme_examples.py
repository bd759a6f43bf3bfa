"""The integration examples of ``docs/integrations.md`` run as written (``memory://``, no model
is called), each with only what the page tells its reader to install for it (its section's
``pip install`` line; every other distribution that redis-session's extras bring is hidden:
``tests/support/extras.py``), and clean up what they create.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.extras import hiding, page_requirements

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
FRAMEWORKS = ["adk", "openai-agents", "langgraph"]

LEFT_BEHIND = """\
import redis_session.aio as _aio

_close = _aio.AsyncRedisStore.close


async def _close_checking(self):  # memory:// alone is a server of this store's own
    log = self.options.prefix + "log"  # the event log is kept (bounded): events outlive sessions
    left = [key async for key in self.client.scan_iter(match="*")]
    left = [k for k in left if k.decode() != log and not k.decode().startswith(log + ":{")]
    gone = self.options.prefix + "gone:"  # a delete's call token, kept a while for its retry
    left = [k for k in left if not k.decode().startswith(gone) or await self.client.pttl(k) < 0]
    await _close(self)
    assert not left, f"the example left {left} behind"


_aio.AsyncRedisStore.close = _close_checking
"""
"""Run before an example: closing a store fails if anything is left in its server."""


def examples(text: str) -> list[tuple[int, str]]:
    """``(offset, code)`` of the ``python`` code blocks of a page's text."""
    found = re.finditer(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    return [(m.start(), m.group(1)) for m in found]


def _run(code: str, requirements: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        env=hiding(requirements),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_page_has_one_example_per_framework() -> None:
    text = PAGE.read_text(encoding="utf-8")
    found = examples(text)
    assert len(found) == 3
    assert "redis_session.integrations.adk" in found[0][1]
    assert "redis_session.integrations.openai_agents" in found[1][1]
    assert "redis_session.integrations.langgraph" in found[2][1]
    for (offset, _), extra in zip(found, FRAMEWORKS, strict=True):  # each names its own
        assert page_requirements(text, offset)[1:] == [f"redis-agent-sessions[{extra},memory]"]


@pytest.mark.parametrize("index", [0, 1, 2], ids=FRAMEWORKS)
def test_integration_example_runs(index: int) -> None:
    text = PAGE.read_text(encoding="utf-8")
    offset, code = examples(text)[index]
    done = _run(LEFT_BEHIND + code, page_requirements(text, offset))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


@pytest.mark.parametrize("index", [0, 1, 2], ids=FRAMEWORKS)
def test_without_the_memory_extra_the_example_says_what_to_install(index: int) -> None:
    # what the page told its reader before this change: the framework's extra alone
    _, code = examples(PAGE.read_text(encoding="utf-8"))[index]
    done = _run(code, [f"redis-agent-sessions[{FRAMEWORKS[index]}]"])
    assert done.returncode == 1
    assert (
        "memory:// needs fakeredis with Lua: pip install 'redis-agent-sessions[memory]'"
        in done.stderr
    )
