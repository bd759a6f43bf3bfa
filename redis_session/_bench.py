"""Kept for the scripts in ``bench/`` that import ``redis_session._bench``: the benchmark's
machinery lives in :mod:`redis_session.bench`. Import that instead; this module goes once
the scripts do.
"""

from __future__ import annotations

from .bench import *  # noqa: F403
from .bench import __all__ as __all__
