"""The branches of one OpenAI Agents conversation in the store (see ``RedisAgentSession``).

A conversation whose main key is ``K`` (``key_prefix + session_id``) keeps:

- branch ``"main"`` under ``K`` itself;
- every other branch ``b`` as a store session of its own under ``K + "#branch:" + b``
  percent-encoded, made by ``store.branch`` (or ``store.create`` when it copies nothing), with
  metadata ``openai-agents:branch = b`` (a session whose key only looks like a branch's is
  not taken for one);
- a registry under ``K + "#branches"``: a store session whose metadata holds one entry per
  branch id ever created (``used:<id>`` = when), written before the branch is made. It
  lists the branches and keeps deleted and cleared ids used; ``clear_session`` keeps it.

Atomicity: a branch is made in one atomic step that fails when its key holds a session, so two
workers creating one id never share it; the registry entry and the branch are two steps (a
failed creation leaves an id used with no branch, which lists as nothing).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from ..aio import AsyncRedisStore
from ..errors import DuplicateSession, SessionNotFound
from ..models import MessageRole, Session
from ._openai_items import sql_time
from ._openai_usage import visible

MAIN_BRANCH = "main"
"""The id of the branch a session starts on, stored under its main key."""
BRANCH_MARK = "#branch:"
"""Joins the main key and a branch id (percent-encoded) into the branch's store key."""
REGISTRY_MARK = "#branches"
"""Ends the store key of a conversation's branch registry."""
BRANCH_META = "openai-agents:branch"
"""The metadata entry naming a branch session's branch id."""
USED = "used:"
"""Begins the registry's metadata entry of each branch id ever created (the value: when)."""


def used_error(branch_id: str) -> ValueError:
    """What ``AdvancedSQLiteSession`` raises for a branch id used before."""
    return ValueError(f"Branch ID '{branch_id}' has already been used. Choose a new branch ID.")


class Branches:
    """The branches of the conversation whose main key is ``main_key``, in ``store``."""

    def __init__(self, store: AsyncRedisStore, main_key: str) -> None:
        self.store = store
        self.main_key = main_key
        self.registry = main_key + REGISTRY_MARK

    def key(self, branch_id: str) -> str:
        """The store key of branch ``branch_id``."""
        if branch_id == MAIN_BRANCH:
            return self.main_key
        return self.main_key + BRANCH_MARK + quote(branch_id, safe="")

    async def session(self, key: str, last: int | None = None) -> Session | None:
        """Store session ``key`` with its newest ``last`` messages (None: all), or None."""
        try:
            return await self.store.get(key, last)
        except SessionNotFound:
            return None

    async def used(self) -> list[str]:
        """The branch ids created in this conversation, oldest first (one read)."""
        registry = await self.session(self.registry, 0)
        if registry is None:
            return []
        entries = registry.metadata.items()
        return [b for _, b in sorted((v, k[len(USED) :]) for k, v in entries if k.startswith(USED))]

    async def reserve(self, branch_name: str | None, turn_number: int) -> str:
        """Record a branch id as used in the registry and return it: ``branch_name``, or
        ``branch_from_turn_<n>_<unix time>`` with the first free ``_2``, ``_3``… suffix.

        Raises:
            ValueError: ``branch_name`` is ``"main"`` or used already.
        """
        used = set(await self.used())
        if branch_name is not None:
            if branch_name == MAIN_BRANCH or branch_name in used:
                raise used_error(branch_name)
            branch_id = branch_name
        else:
            base = f"branch_from_turn_{turn_number}_{int(time.time())}"
            branch_id, suffix = base, 1
            while branch_id in used:
                suffix += 1
                branch_id = f"{base}_{suffix}"
        entry = {USED + branch_id: datetime.now(UTC).isoformat()}
        try:
            await self.store.update_metadata(self.registry, set=entry)
        except SessionNotFound:
            try:
                await self.store.create(Session(key=self.registry, metadata=entry))
            except DuplicateSession:  # another worker created the registry first
                await self.store.update_metadata(self.registry, set=entry)
        return branch_id

    async def forget(self, branch_id: str) -> None:
        """Drop the registry's entry of ``branch_id`` (a creation that did not happen)."""
        await self.store.update_metadata(self.registry, delete=[USED + branch_id])

    async def make(self, branch_id: str, source: Session, at: str | None) -> str:
        """Create branch ``branch_id`` from ``source`` (read whole): its fields, metadata and
        history up to and including message ``at`` (None: none of it); returns the branch's
        key.

        Raises:
            DuplicateSession: the branch's key holds a session.
            SessionNotFound, MessageNotFound: ``source`` changed since it was read.
        """
        key = self.key(branch_id)
        mark = {BRANCH_META: branch_id}
        if at is None:  # what store.branch makes, with no message
            metadata = {**source.metadata, **mark}
            fields: dict[str, Any] = {"key": key, "history": [], "metadata": metadata}
            fields |= {"branch_of": source.key, "branch_at": "", "ended_at": None}
            await self.store.create(source.model_copy(update=fields))
        else:
            await self.store.branch(source.key, key, at=at, metadata=mark)
        return key

    async def exists(self, branch_id: str) -> bool:
        """Whether branch ``branch_id`` holds items (one read)."""
        session = await self.session(self.key(branch_id), 1)
        return session is not None and bool(session.history) and is_branch(branch_id, session)

    async def sessions(self) -> list[tuple[str, Session]]:
        """``(branch id, session read whole)`` of every branch that exists (empty ones too):
        the registry read, then every branch, together.
        """
        ids = [MAIN_BRANCH, *await self.used()]
        found = await asyncio.gather(*(self.session(self.key(b)) for b in ids))
        return [
            (branch_id, session)
            for branch_id, session in zip(ids, found, strict=True)
            if session is not None and is_branch(branch_id, session)
        ]

    async def rows(self, current: str) -> list[dict[str, Any]]:
        """``list_branches``' rows (see :meth:`sessions`); usage records are not items."""
        rows = []
        for branch_id, session in await self.sessions():
            history = visible(session.history)
            if not history:
                continue
            rows.append(
                {
                    "branch_id": branch_id,
                    "message_count": len(history),
                    "user_turns": sum(m.role.normalize() == MessageRole.USER for m in history),
                    "is_current": branch_id == current,
                    "created_at": sql_time(session.created_at),
                }
            )
        return sorted(rows, key=lambda row: str(row["created_at"]))

    async def delete_all(self) -> None:
        """Delete every branch's session (main's too), keeping the registry: the registry read,
        then the deletes together.
        """
        keys = [self.main_key, *(self.key(b) for b in await self.used())]
        await asyncio.gather(*(self.store.delete(k) for k in keys))


def is_branch(branch_id: str, session: Session) -> bool:
    """Whether ``session`` is branch ``branch_id`` (not a session whose key only looks so)."""
    return branch_id == MAIN_BRANCH or session.metadata.get(BRANCH_META) == branch_id
