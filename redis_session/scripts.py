"""Finds, reads and names the Lua scripts.

The scripts live in the repository's top-level ``lua/`` folder. A wheel carries them as
``redis_session/lua/`` (see ``pyproject.toml``); a source checkout or an editable install reads
them from ``lua/`` beside the package. Every script is sent with the parts of ``_prelude.lua``
it uses in front of it.

Only the parts it uses: Redis runs a script's whole text on every call, so each ``local
function`` of the prelude is a closure built per call whether the script calls it or not
(docs/benchmarks.md, "Figures behind the code"). A script whose common case answers early
marks where that case ends with a :data:`REST_MARK` line: the parts its code above the line
uses come first, the others in place of the line, so that a call answered above it never
builds them.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

PRELUDE = "_prelude"

REST_MARK = "-- (the prelude's other parts)"
"""A line of a script after which the prelude's parts that only the code below it uses are
sent (see :func:`with_prelude`)."""

SCRIPT_NAMES: tuple[str, ...] = (
    "append_child_message",
    "append_message",
    "begin_rekey",
    "children_of",
    "claim_turn",
    "cleanup_failed_turn",
    "compact_messages",
    "copy_range",
    "create",
    "delete",
    "discard_child",
    "discard_children",
    "end_session",
    "finish_rekey",
    "fork_child",
    "get",
    "get_child",
    "init_keyring",
    "merge_child",
    "merge_stage",
    "migrate_secrets",
    "pop_message",
    "reap_expired",
    "read_group",
    "read_range",
    "rekey_session",
    "release_turn",
    "renew_turn",
    "reseal_session",
    "rewind",
    "set_checksum",
    "set_secret",
    "stage_push",
    "update",
    "update_metadata",
)


def lua_dir() -> Path:
    """The folder the scripts are read from: inside the package (wheel) or beside it."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "lua", here.parent / "lua"):
        if (candidate / f"{PRELUDE}.lua").is_file():
            return candidate
    raise FileNotFoundError(f"redis_session: no lua/ folder next to {here}")


@cache
def script_source(name: str) -> str:
    """The full text sent to Redis for script ``name``: the prelude's parts that the script
    uses (see :func:`prelude_for`), then the script.
    """
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    return with_prelude((lua_dir() / f"{name}.lua").read_text(encoding="utf-8"))


def with_prelude(body: str) -> str:
    """Script ``body`` as sent to Redis: after the parts of the prelude it uses (so that a
    script of an integration has the store's status codes, checks and window at hand). Where
    ``body`` has a :data:`REST_MARK` line, the parts that its code above the line uses come
    first and the others it uses replace the line.
    """
    prelude = (lua_dir() / f"{PRELUDE}.lua").read_text(encoding="utf-8")
    above, mark, below = body.partition(f"\n{REST_MARK}\n")
    if not mark:
        return f"{prelude_for(prelude, body)}\n{body}"
    parts = _parts(prelude)
    first, every = _kept(parts, _words(above)), _kept(parts, _words(body))
    rest = [keep and not early for keep, early in zip(every, first, strict=True)]
    return f"{_joined(parts, first)}\n{above}\n{_joined(parts, rest)}\n{below}"


# A prelude part defines `local function name(` or `local A, B = ...` at the start of a line.
_DEFINES = re.compile(r"^local\s+(?:function\s+(\w+)|((?:\w+\s*,\s*)*\w+)\s*=)", re.M)
_WORD = re.compile(r"\w+")
_COMMENT = re.compile(r"--[^\n]*")


def _words(lua: str) -> set[str]:
    """The words of Lua code (its comments left out: a name only mentioned there is not used;
    no script has ``--`` in a string).
    """
    return set(_WORD.findall(_COMMENT.sub("", lua)))


def _parts(prelude: str) -> list[tuple[set[str], str]]:
    """The blank-line separated blocks of ``prelude``, each with the names it defines. A block
    that defines nothing (a comment) is kept with every script; one that holds code but defines
    nothing (a definition split by a blank line) raises ``ValueError``.
    """
    parts = []
    for block in prelude.strip().split("\n\n"):
        names = set()
        for function, variables in _DEFINES.findall(block):
            names |= {function} if function else {v.strip() for v in variables.split(",")}
        if not names and any(not line.lstrip().startswith("--") for line in block.splitlines()):
            # A blank line inside a definition would split it: refuse rather than send half.
            raise ValueError(f"prelude block with code but no definition: {block[:60]!r}")
        parts.append((names, block))
    return parts


def _kept(parts: list[tuple[set[str], str]], used: set[str]) -> list[bool]:
    """Which of ``parts`` code of words ``used`` needs, directly or through another part."""
    used = set(used)
    kept = [False] * len(parts)
    grew = True
    while grew:
        grew = False
        for i, (names, block) in enumerate(parts):
            if not kept[i] and (not names or names & used):
                kept[i] = grew = True
                used |= _words(block)
    return kept


def _joined(parts: list[tuple[set[str], str]], kept: list[bool]) -> str:
    return "\n\n".join(block for (_, block), keep in zip(parts, kept, strict=True) if keep) + "\n"


def prelude_for(prelude: str, body: str) -> str:
    """The parts of ``prelude`` (its blank-line separated blocks, each a definition with its
    comment) that ``body`` uses, directly or through another part it uses, in prelude order.
    A block that defines nothing (a comment) is kept; one that holds code but defines nothing
    (a definition split by a blank line) raises ``ValueError``. Names are matched as words of
    the code, strings included: a part is left out only when its names appear in none.
    """
    parts = _parts(prelude)
    return _joined(parts, _kept(parts, _words(body)))
