"""Finds, reads and names the Lua scripts.

The scripts live in the repository's top-level ``lua/`` folder. A wheel carries them as
``redis_session/lua/`` (see ``pyproject.toml``); a source checkout or an editable install reads
them from ``lua/`` beside the package. Every script is sent with ``_prelude.lua`` in front of it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

PRELUDE = "_prelude"

SCRIPT_NAMES: tuple[str, ...] = (
    "append_child_message",
    "append_message",
    "begin_rekey",
    "compact_messages",
    "create",
    "delete",
    "discard_child",
    "finish_rekey",
    "fork_child",
    "get_child",
    "init_keyring",
    "merge_child",
    "migrate_secrets",
    "pop_message",
    "rekey_session",
    "reseal_session",
    "set_checksum",
    "set_secret",
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
    """The full text sent to Redis for script ``name``: the prelude, then the script."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    folder = lua_dir()
    prelude = (folder / f"{PRELUDE}.lua").read_text(encoding="utf-8")
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    return f"{prelude}\n{body}"
