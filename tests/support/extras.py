"""What a fresh ``pip install`` of some requirements would hold, from the metadata of the
distributions installed here, and a subprocess environment in which everything else that
redis-session's extras bring is absent.

:func:`installed_by` follows ``Requires-Dist`` from requirements such as
``redis-agent-sessions[memory]`` or ``pytest``, transitively, each requirement's markers evaluated
for this interpreter and the extras asked for. :func:`optional` is what some extra of
redis-session brings and the bare package does not. :func:`hiding` gives a subprocess the
environment of a user who installed only given requirements: the rest of :func:`optional`
cannot be imported and is not listed by ``importlib.metadata`` (``tests/support/hide``'s
``sitecustomize``). The versions installed here stand in for what the index would give.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "redis-agent-sessions"
HIDE_DIR = Path(__file__).resolve().parent / "hide"
MODULES_ENV = "RS_TEST_HIDDEN_MODULES"
DISTS_ENV = "RS_TEST_HIDDEN_DISTS"
MODULE_SUFFIXES = ("py", "so", "pyd")


@functools.cache
def _distribution(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def _installed_by(requirements: frozenset[str]) -> frozenset[str]:
    found: set[str] = set()
    seen: set[tuple[str, str]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        dist = _distribution(name)
        if dist is None:  # not installed here, so nothing to hide either
            continue
        found.add(name)
        for extra in ("", *sorted(requirement.extras)):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for text in dist.requires or ():
                needed = Requirement(text)
                if needed.marker is None or needed.marker.evaluate({"extra": extra}):
                    todo.append(needed)
    return frozenset(found)


def installed_by(requirements: Iterable[str]) -> frozenset[str]:
    """The (canonical) names of the installed distributions that installing
    ``requirements`` would bring, the requirements' own included.
    """
    return _installed_by(frozenset(requirements))


def extras() -> tuple[str, ...]:
    """redis-session's extras, as its metadata declares them."""
    dist = _distribution(PROJECT)
    assert dist is not None, "redis-session is not installed"
    return tuple(dist.metadata.get_all("Provides-Extra") or ())


def optional() -> frozenset[str]:
    """What some extra of redis-session brings that the bare package does not."""
    every = installed_by([f"{PROJECT}[{','.join(extras())}]"])
    return every - installed_by([PROJECT])


@functools.cache
def modules_of(name: str) -> frozenset[str]:
    """The importable names a distribution installs: its top-level modules, or for a
    namespace package (``google`` of google-adk) the first level holding an ``__init__``
    (``google.adk``), so that hiding it hides no other distribution's part.
    """
    dist = _distribution(name)
    if dist is None:
        return frozenset()
    if dist.files is None:
        top = dist.read_text("top_level.txt") or ""
        return frozenset(line.strip() for line in top.splitlines() if line.strip())
    paths = {tuple(f.parts) for f in dist.files}
    roots: set[str] = set()
    for parts in paths:
        *dirs, leaf = parts
        stem, _, suffix = leaf.partition(".")
        if (
            suffix.rpartition(".")[2] not in MODULE_SUFFIXES
            or "__pycache__" in dirs
            or any(d.startswith("..") or d.endswith((".dist-info", ".data")) for d in dirs[:1])
        ):
            continue
        for depth in range(1, len(dirs) + 1):
            if (*dirs[:depth], "__init__.py") in paths:
                roots.add(".".join(dirs[:depth]))
                break
        else:
            roots.add(".".join([*dirs, stem]))
    return frozenset(r for r in roots if not any(r.startswith(f"{o}.") for o in roots))


def _canonical_installed() -> frozenset[str]:
    return frozenset(
        canonicalize_name(d.metadata["Name"])
        for d in importlib.metadata.distributions()
        if d.metadata["Name"]
    )


def hidden(requirements: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """``(distributions, modules)`` to hide from a user who installed only ``requirements``:
    the optional distributions they do not bring, and those distributions' modules that no
    distribution left visible shares (a namespace such as ``google`` stays when one does).
    """
    dists = optional() - installed_by(requirements)
    kept: set[str] = set()
    for name in _canonical_installed() - dists:
        kept |= modules_of(name)
    modules = {
        m
        for name in dists
        for m in modules_of(name)
        if not any(k == m or k.startswith(f"{m}.") for k in kept)
    }
    return frozenset(dists), frozenset(modules)


def hiding(requirements: Iterable[str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a subprocess of a user who installed only
    ``requirements``: what else redis-session's extras bring is absent there.
    """
    dists, modules = hidden(requirements)
    out = dict(os.environ if env is None else env)
    path = out.get("PYTHONPATH", "")
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(HIDE_DIR), path) if p)
    out[DISTS_ENV] = ",".join(sorted(dists))
    out[MODULES_ENV] = ",".join(sorted(modules))
    return out


PIP_INSTALL = re.compile(r"pip install\s+([^`\n]+)")
SHELL_ENDS = frozenset({"&&", "||", ";", "|"})


def pip_requirements(text: str) -> list[str]:
    """What the ``pip install`` lines of ``text`` (in code blocks or inline code) install:
    the project as ``redis-agent-sessions[...]`` (from ``.``, ``-e '.[cli]'``,
    ``'redis-agent-sessions[adk]'``) and any other requirement as written.
    """
    found: list[str] = []
    for match in PIP_INSTALL.finditer(text):
        try:
            words = shlex.split(match.group(1), comments=True)
        except ValueError:  # a quote left open in a comment
            words = match.group(1).partition("#")[0].split()
        for word in words:
            if word in SHELL_ENDS:
                break
            if word.startswith("-"):
                continue
            if word == "." or word.startswith(".["):
                word = PROJECT + word[1:]
            found.append(word)
    return found


FENCED = re.compile(r"^```.*?^```", re.M | re.S)
SECTION = re.compile(r"^#{1,2} ", re.M)


def page_requirements(text: str, offset: int) -> list[str]:
    """What the reader of a page (``text``) has installed at ``offset`` (a code block): the
    package, and what the ``pip install`` lines of the block's section name (from the ``#``
    or ``##`` heading above it to the next), or, when its section has none, what all of the
    page's name. A page with none documents the bare package: an example that needs an extra
    must say so on its page.
    """
    masked = FENCED.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)  # no '#' of code
    starts = [0, *(m.start() for m in SECTION.finditer(masked)), len(text)]
    begin = max(s for s in starts if s <= offset)
    end = min(s for s in starts if s > offset)
    named = pip_requirements(text[begin:end]) or pip_requirements(text)
    return [PROJECT, *named]
