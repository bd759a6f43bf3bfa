"""Makes distributions absent from this interpreter, for a test that runs code as a user with
fewer extras installed would (``tests/support/extras.py`` puts this directory on
``PYTHONPATH`` and names what to hide in two environment variables):

- ``RS_TEST_HIDDEN_MODULES``: top-level modules (or namespace subpackages such as
  ``google.adk``), comma-separated, that cannot be found: ``import`` raises
  ``ModuleNotFoundError`` and ``importlib.util.find_spec`` returns None, as when not installed;
- ``RS_TEST_HIDDEN_DISTS``: distribution names that ``importlib.metadata`` does not list (no
  version, no entry points, so no pytest plugin of theirs is loaded).

Every finder on ``sys.meta_path`` is wrapped so that it finds neither.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from typing import Any

MODULES_ENV = "RS_TEST_HIDDEN_MODULES"
DISTS_ENV = "RS_TEST_HIDDEN_DISTS"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class _Hiding:
    """A meta path finder that finds what ``finder`` finds, except what is hidden."""

    def __init__(self, finder: Any, modules: tuple[str, ...], dists: frozenset[str]) -> None:
        self.finder, self.modules, self.dists = finder, modules, dists
        self.under = tuple(f"{m}." for m in modules)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name in self.modules or name.startswith(self.under):
            return None
        find = getattr(self.finder, "find_spec", None)
        return None if find is None else find(name, path, target)

    def find_distributions(self, *args: Any, **kwargs: Any) -> Iterable[Any]:
        find = getattr(self.finder, "find_distributions", None)
        if find is None:
            return ()
        return (d for d in find(*args, **kwargs) if _canonical(_name(d)) not in self.dists)

    def invalidate_caches(self) -> None:
        invalidate = getattr(self.finder, "invalidate_caches", None)
        if invalidate is not None:
            invalidate()


def _name(dist: Any) -> str:
    name = getattr(dist, "_normalized_name", None)  # from the .dist-info name: no file read
    return str(name) if name else str(dist.metadata["Name"] or "")


def _hide() -> None:
    modules = tuple(m for m in os.environ.get(MODULES_ENV, "").split(",") if m)
    dists = frozenset(_canonical(d) for d in os.environ.get(DISTS_ENV, "").split(",") if d)
    if modules or dists:
        sys.meta_path[:] = [_Hiding(finder, modules, dists) for finder in sys.meta_path]


_hide()
