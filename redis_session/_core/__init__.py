"""The sans-I/O core: every store operation as a generator of Redis requests (:mod:`.core`).

Nothing here talks to Redis or imports redis-py's clients. This module imports nothing: the
public modules below the stores (``contracts``, ``codec``, ``options``) import
:mod:`.requests`, :mod:`.args` and :mod:`.cache` from here, and an ``__init__`` that loaded the
operations would close a circle.
"""
