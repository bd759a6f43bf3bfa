"""``AsyncRedisSaver``: a LangGraph checkpointer over an ``AsyncRedisStore`` (its twin over a
``RedisStore``: ``_saver``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...aio import AsyncRedisStore
from ...errors import DuplicateSession, InvalidArgument, SessionNotFound
from ...models import Session
from ._base import SaverBase, TTLConfig, store_ttl
from ._records import (
    THREAD_PREFIX,
    DeltaWalk,
    Listing,
    plan_writes,
    point,
    runs_in,
    thread_key,
    thread_of,
    to_prune,
)
from ._thread import delete_key, one, run_registry, smembers


class AsyncRedisSaver(SaverBase):
    """A LangGraph checkpointer over an :class:`~redis_session.AsyncRedisStore` (see the
    package).

    The blocking methods may be called from another thread than the event loop's (LangGraph's
    sync APIs in a worker thread): they run the async ones on the loop the saver last ran on
    (or in a new loop when it never ran); from the loop's own thread they raise
    ``asyncio.InvalidStateError`` (they would block it).
    """

    def __init__(
        self,
        store: AsyncRedisStore,
        *,
        serde: SerializerProtocol | None = None,
        ttl_config: TTLConfig | None = None,
        exclusive_steps: bool = False,
    ) -> None:
        super().__init__(store, serde=serde, ttl_config=ttl_config, exclusive_steps=exclusive_steps)
        self.store = store
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        serde: SerializerProtocol | None = None,
        ttl_config: TTLConfig | None = None,
        exclusive_steps: bool = False,
        **store_options: Any,
    ) -> AsyncRedisSaver:
        """A saver over ``AsyncRedisStore.from_url(url, **store_options)`` (``ttl_config``'s
        ``default_ttl`` becomes the store's ``ttl``).
        """
        store_ttl(ttl_config, store_options)
        store = AsyncRedisStore.from_url(url, **store_options)
        return cls(store, serde=serde, ttl_config=ttl_config, exclusive_steps=exclusive_steps)

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        redis_url: str,
        *,
        ttl: TTLConfig | None = None,
        serde: SerializerProtocol | None = None,
        exclusive_steps: bool = False,
        **store_options: Any,
    ) -> AsyncIterator[AsyncRedisSaver]:
        """``langgraph-checkpoint-redis``'s way in (``ttl`` is its ``ttl_config``): a saver
        over ``AsyncRedisStore.from_url(redis_url, **store_options)`` whose store is closed at
        the block's end.
        """
        saver = cls.from_url(
            redis_url, serde=serde, ttl_config=ttl, exclusive_steps=exclusive_steps,
            **store_options,
        )  # fmt: skip
        try:
            yield saver
        finally:
            await saver.store.close()

    def setup(self) -> None:
        """Nothing to set up (no search index: ``langgraph-checkpoint-redis`` code calls it)."""

    async def asetup(self) -> None:
        """Nothing to set up (see :meth:`setup`)."""

    async def _run(self, op: Any) -> Any:
        self._loop = asyncio.get_running_loop()
        return await self.store.run(op)

    def _block(self, coro: Any) -> Any:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = self._loop
        if running is not None and (loop is None or running is loop):
            coro.close()
            raise asyncio.InvalidStateError(
                "AsyncRedisSaver's blocking methods run from another thread than the event "
                "loop's; in the loop, await its async methods (aget_tuple, aput, ...)"
            )
        if loop is not None and loop.is_running():
            return asyncio.run_coroutine_threadsafe(coro, loop).result()
        return asyncio.run(coro)

    async def _made(self, thread_id: str) -> None:
        with contextlib.suppress(DuplicateSession):
            await self.store.create(Session(key=thread_key(thread_id)))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the channel values of its new versions in one script
        (making the thread's session first when there is none). With ``exclusive_steps``,
        ``StepTaken`` when another worker already wrote the step that follows its parent.
        """
        plan, register = self._plan(config, checkpoint, metadata, new_versions)
        if register:
            await self._run(self._scripts.register_run(plan))
            self._registered_now(plan)
        try:
            await self._run(self._scripts.put(plan))
        except SessionNotFound:
            await self._made(plan.thread_id)
            await self._run(self._scripts.put(plan))
        return plan.config

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes on a checkpoint in one script (a regular write
        already stored under its task and index is kept, a special one replaced).
        """
        thread_id, cp, triples = plan_writes(self.serde, config, writes, task_id, task_path)
        try:
            await self._run(self._scripts.put_writes(thread_id, cp, triples))
        except SessionNotFound:
            await self._made(thread_id)
            await self._run(self._scripts.put_writes(thread_id, cp, triples))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its thread's newest in its namespace without a
        ``checkpoint_id``), with its channel values and pending writes: one script.
        """
        listing = point(self.serde, config)
        page = await self._run(
            self._scripts.read(listing.thread_id, listing.high, listing.low, 1, listing.exact)
        )
        got = listing.take(page)
        return got[0] if got else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints, newest first in each namespace: of ``config``'s thread (and
        namespace, when it names one), else of every thread (the store's index of sessions,
        ``langgraph/`` keys only). Reads one page of 100 at a time in one script, never the
        keyspace.
        """
        if config is None:
            sessions = await self.store.list_sessions(prefix=THREAD_PREFIX)
            left = limit
            for s in sessions:
                if left is not None and left <= 0:
                    return
                async for tup in self.alist(
                    {"configurable": {"thread_id": thread_of(s.key)}},
                    filter=filter, before=before, limit=left,
                ):  # fmt: skip
                    if left is not None:
                        left -= 1
                    yield tup
            return
        listing = Listing(
            self.serde, str(config["configurable"]["thread_id"]), config, filter, before, limit
        )
        while True:
            page = await self._run(
                self._scripts.read(
                    listing.thread_id, listing.high, listing.low, listing.count, listing.exact
                )
            )
            for tup in listing.take(page):
                yield tup
            if listing.last(page):
                return

    async def adelete_thread(self, thread_id: str) -> None:
        """Remove thread ``thread_id``: its checkpoints, writes, values and session (which
        logs its ``delete`` event).
        """
        ops = self._scripts
        runs = runs_in(await self._run(ops.members(str(thread_id), b"g\0", b"g\1")))
        await self.store.delete(thread_key(thread_id))
        await self._run(ops.drop_data(str(thread_id), runs))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove every checkpoint (and its writes) of runs ``run_ids``, in every thread the
        runs' registries name (no scan).
        """
        ops = self._scripts
        for run_id in run_ids:
            registry = run_registry(self.store.extension, str(run_id))
            (threads,) = await self._run(one(smembers(registry)))
            for raw in threads:
                thread_id = bytes(raw).decode()
                head = b"u\0" + str(run_id).encode() + b"\0"
                members = await self._run(ops.members(thread_id, head, head[:-1] + b"\1"))
                await self._run(ops.remove(thread_id, [m[len(head) :] for m in members]))
                await self._run(ops.forget_run(thread_id, str(run_id)))
            await self._run(one(delete_key(registry)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy thread ``source_thread_id`` (its checkpoints, writes, values) to
        ``target_thread_id``: the store's ``branch`` makes the target's session (a
        ``branch`` event), then one script writes what one snapshot of the source held.
        """
        source, target = str(source_thread_id), str(target_thread_id)
        fields, members = await self._run(self._scripts.snapshot(source))
        if not members:
            return
        try:
            await self.store.branch(thread_key(source), thread_key(target))
        except DuplicateSession:
            pass
        except SessionNotFound:
            await self._made(target)
        runs = runs_in(m for m in members if m[:2] == b"g\0")
        await self._run(self._scripts.register(target, runs))
        await self._run(self._scripts.load(target, fields, members))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: remove every checkpoint but the newest of each namespace (with
        their writes, and the values no kept checkpoint holds), 100 per script; ``delete``:
        remove the threads.
        """
        for thread_id in thread_ids:
            if strategy == "delete":
                await self.adelete_thread(thread_id)
                continue
            if strategy != "keep_latest":
                raise InvalidArgument("strategy", f"{strategy!r}: keep_latest or delete")
            members = await self._run(self._scripts.members(str(thread_id), b"c\0", b"c\1"))
            await self._run(self._scripts.remove(str(thread_id), to_prune(members)))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """For LangGraph's ``DeltaChannel``: per channel, the writes of ``config``'s
        ancestors back to the nearest one holding a value of it (its seed), walked by
        ``langgraph_walk.lua`` 100 ancestors a script (LangGraph's default: one ``get_tuple``
        an ancestor).
        """
        if not channels:
            return {}
        walk = DeltaWalk(self.serde, config, channels)
        thread_id = walk.listing.thread_id
        while True:
            walked, last = await self._run(
                self._scripts.walk(
                    thread_id, walk.start, walk.listing.high, walk.listing.low,
                    sorted(walk.remaining),
                )
            )  # fmt: skip
            if not walk.take(walked, last):
                return walk.result()

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """:meth:`aget_delta_channel_history`, from another thread than the loop's."""
        result: Mapping[str, DeltaChannelHistory] = self._block(
            self.aget_delta_channel_history(config=config, channels=channels)
        )
        return result

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`aget_tuple`, from another thread than the loop's."""
        result: CheckpointTuple | None = self._block(self.aget_tuple(config))
        return result

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """:meth:`alist`, from another thread than the loop's."""

        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        found: list[CheckpointTuple] = self._block(collect())
        yield from found

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`aput`, from another thread than the loop's."""
        result: RunnableConfig = self._block(self.aput(config, checkpoint, metadata, new_versions))
        return result

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`aput_writes`, from another thread than the loop's."""
        self._block(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """:meth:`adelete_thread`, from another thread than the loop's."""
        self._block(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`adelete_for_runs`, from another thread than the loop's."""
        self._block(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`acopy_thread`, from another thread than the loop's."""
        self._block(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`aprune`, from another thread than the loop's."""
        self._block(self.aprune(thread_ids, strategy=strategy))
