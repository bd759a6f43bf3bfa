"""LangGraph's own conformance suite for checkpointers (``langgraph-checkpoint-conformance``)
on RedisSaver and AsyncRedisSaver, every backend (tests/conftest.py): each base capability
and each extended one the savers implement (all of them) must pass; the report is asserted,
never skipped. Again with LangGraph's ``EncryptedSerializer``, which must leave no plaintext.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from redis_session.integrations.langgraph import AsyncRedisSaver, RedisSaver
from redis_session.integrations.langgraph._thread import keys_of
from tests.conftest import FLAVOURS, Backend

COUNTER = itertools.count()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_the_conformance_suite_passes_every_capability(
    backend: Backend, flavour: str
) -> None:
    stores: list[Any] = []

    @checkpointer_test(name=f"{'Async' if flavour == 'async' else ''}RedisSaver[{backend.name}]")
    async def saver() -> AsyncIterator[BaseCheckpointSaver[str]]:
        # a prefix per capability suite (under the test's, which the harness purges): the
        # suite lists every thread (list(None)) and expects its own only
        prefix = f"{backend.prefix}{next(COUNTER)}:"
        if flavour == "sync":
            store = backend.sync_store(prefix=prefix)
            stores.append(store)
            yield RedisSaver(store)
        else:
            astore = backend.async_store(prefix=prefix)
            yield AsyncRedisSaver(astore)
            await astore.close()

    report = await validate(saver)
    for store in stores:
        store.close()
    results = report.to_dict()["results"]
    summary = {name: (r["detected"], r["passed"], r["failures"]) for name, r in results.items()}
    assert set(results) == {c.value for c in ALL_CAPABILITIES}, summary
    for name, result in results.items():
        assert result["detected"], f"{name} not detected"
        assert result["passed"] is True, f"{name}: {result['failures']}"
        assert result["tests_failed"] == 0 and result["tests_passed"] > 0, summary
    assert report.conformance_level() == "FULL"
    report.print_report()  # shown with -s: the report the issue asks for


class AesGcm:
    """A LangGraph ``CipherProtocol`` over ``cryptography``'s AES-GCM (a dependency already)."""

    def __init__(self) -> None:
        self.aead = AESGCM(AESGCM.generate_key(bit_length=256))

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(12)
        return "aesgcm", nonce + self.aead.encrypt(nonce, plaintext, None)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "aesgcm"
        return self.aead.decrypt(ciphertext[:12], ciphertext[12:], None)


@pytest.mark.timeout(120)
@pytest.mark.fake
async def test_langgraph_s_encrypted_serializer_passes_too_and_seals_what_it_stores() -> None:
    backend = Backend("fake", None)
    serde = EncryptedSerializer(AesGcm())

    @checkpointer_test(name="RedisSaver[fake, EncryptedSerializer]")
    async def saver() -> AsyncIterator[BaseCheckpointSaver[str]]:
        yield AsyncRedisSaver(
            backend.async_store(prefix=f"{backend.prefix}{next(COUNTER)}:"), serde=serde
        )

    report = await validate(saver)
    assert report.conformance_level() == "FULL", report.to_dict()

    store = backend.async_store()
    sealed = AsyncRedisSaver(store, serde=serde)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"notes": "plaintext-that-must-not-be-stored"}
    checkpoint["channel_versions"] = {"notes": "1"}
    config = await sealed.aput(
        {"configurable": {"thread_id": "s1", "checkpoint_ns": ""}},
        checkpoint,
        {"source": "input", "step": -1, "parents": {}},
        {"notes": "1"},
    )
    await sealed.aput_writes(config, [("notes", "a-pending-plaintext")], "task")
    got = await sealed.aget_tuple(config)
    assert got is not None and got.checkpoint["channel_values"] == checkpoint["channel_values"]
    assert got.pending_writes == [("task", "notes", "a-pending-plaintext")]
    raw = backend.sync_client()
    values = b"".join(raw.hvals(keys_of(store.extension, "s1").data))
    assert b"plaintext" not in values and b"aesgcm" in values
    await store.close()
    backend.close()


@pytest.mark.timeout(120)
@pytest.mark.fake
async def test_a_store_with_a_passphrase_passes_too() -> None:
    """The thread's session is sealed as any (its data key made at create); the checkpoints
    go through the saver's serde (LangGraph's EncryptedSerializer seals them, above)."""
    backend = Backend("fake", None)
    stores = []

    @checkpointer_test(name="AsyncRedisSaver[fake, passphrase]")
    async def saver() -> AsyncIterator[BaseCheckpointSaver[str]]:
        prefix = f"{backend.prefix}{next(COUNTER)}:"
        store = backend.async_store(prefix=prefix, passphrase="correct horse", kdf_work=10)
        stores.append(store)
        yield AsyncRedisSaver(store)

    report = await validate(saver)
    assert report.conformance_level() == "FULL", report.to_dict()
    assert all(store.encrypted for store in stores)
    for store in stores:
        await store.close()
    backend.close()
