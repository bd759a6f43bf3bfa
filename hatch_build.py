"""Hatch build hook: compiles ``redis_session/_transport/_speedups.c``, the C decoder of stored
messages.

The extension is optional. Without a C compiler (or with ``REDIS_SESSION_PURE_PYTHON`` set)
the build goes on, says so on stderr and makes a pure-Python wheel: the codec then validates
every element with pydantic (same results, slower). An editable install builds the module next
to its source, where the checkout's package imports it; a wheel carries it and is tagged for
this interpreter and platform.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class SpeedupsBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compile the extension into the wheel (or next to the source for an editable one)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Build the extension before hatch collects the wheel's files."""
        if self.target_name != "wheel":
            return
        source = Path(self.root, "redis_session", "_transport", "_speedups.c")
        name = f"_speedups{sysconfig.get_config_var('EXT_SUFFIX')}"
        if version == "editable":  # the checkout holds what this install built, or nothing
            for old in source.parent.glob("_speedups*.so"):
                old.unlink()
        if os.environ.get("REDIS_SESSION_PURE_PYTHON"):
            return
        if version == "editable":  # beside the source, then renamed (same file system)
            built = source.with_name(f".{name}.building")
        else:
            built = Path(tempfile.mkdtemp(prefix="redis-session-build-"), name)
        error = compile_extension(source, built)
        if error:
            built.unlink(missing_ok=True)
            print(
                f"redis-agent-sessions: C decoder not built ({error}); pure Python", file=sys.stderr
            )
            return
        if version == "editable":
            # replaced, not written over: a process that has the old module loaded keeps it
            os.replace(built, source.with_name(name))
        else:
            build_data["force_include"][str(built)] = f"redis_session/_transport/{name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True


def compile_extension(source: Path, target: Path) -> str:
    """Compile and link ``source`` into ``target`` with this interpreter's own compiler and
    flags; the reason it failed, or "" when it did not.
    """
    ldshared = sysconfig.get_config_var("LDSHARED")
    if not ldshared or sys.platform == "win32":
        return "no C compiler configured for this Python"
    command = [
        *shlex.split(ldshared),
        *shlex.split(sysconfig.get_config_var("CCSHARED") or ""),
        "-O2",
        "-I",
        sysconfig.get_paths()["include"],
        str(source),
        "-o",
        str(target),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except OSError as exc:
        return str(exc)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return ""
