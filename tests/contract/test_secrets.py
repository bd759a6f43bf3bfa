"""Salts, checksums, secrets and their all-or-nothing migration."""

from __future__ import annotations

from typing import Any

import pytest

from redis_session import InvalidArgument, ItemNotFound, MigrationConflict
from tests.conftest import Backend


async def test_salts_and_checksums(store: Any) -> None:
    with pytest.raises(ItemNotFound) as info:
        await store.get_salt("default")
    assert (info.value.kind, info.value.name) == ("salt", "default")
    with pytest.raises(ItemNotFound, match="salt 'default'"):
        await store.set_checksum("default", b"c")
    with pytest.raises(ItemNotFound, match="checksum"):
        await store.get_checksum("default")
    await store.set_salt("default", b"\x00salt\xff")
    await store.set_checksum("default", b"check")
    assert await store.get_salt("default") == b"\x00salt\xff"
    assert await store.get_checksum("default") == b"check"
    with pytest.raises(InvalidArgument, match="salt"):
        await store.set_salt("x", "not bytes")
    with pytest.raises(InvalidArgument, match="name"):
        await store.get_salt("")


async def test_secrets_crud(store: Any) -> None:
    assert await store.list_secrets() == []
    await store.set_secret("b", b"2")
    await store.set_secret("a", b"1")
    assert await store.list_secrets() == ["a", "b"]
    assert await store.get_secret("a") == b"1"
    assert await store.delete_secret("a") is True
    assert await store.delete_secret("a") is False
    with pytest.raises(ItemNotFound, match="secret 'a'"):
        await store.get_secret("a")


async def test_migrate_secrets_applies_all(store: Any) -> None:
    for name in ("x", "y", "z"):
        await store.set_secret(name, name.encode())
    assert await store.migrate_secrets(lambda b: b"new-" + b, b"salt2", b"sum2") == 3
    assert [await store.get_secret(n) for n in ("x", "y", "z")] == [b"new-x", b"new-y", b"new-z"]
    assert await store.get_salt("default") == b"salt2"
    assert await store.get_checksum("default") == b"sum2"


async def test_migrate_secrets_is_all_or_nothing(store: Any) -> None:
    await store.set_salt("default", b"salt1")
    for name in ("x", "y", "z"):
        await store.set_secret(name, name.encode())

    def failing(old: bytes) -> bytes:
        if old == b"y":
            raise RuntimeError("cannot decrypt y")
        return b"new-" + old

    with pytest.raises(RuntimeError, match="cannot decrypt y"):
        await store.migrate_secrets(failing, b"salt2", b"sum2")
    assert [await store.get_secret(n) for n in ("x", "y", "z")] == [b"x", b"y", b"z"]
    assert await store.get_salt("default") == b"salt1"


async def test_migration_refused_when_a_write_interleaves(backend: Backend, store: Any) -> None:
    other = backend.sync_store()
    await store.set_secret("x", b"x")

    def reencrypt_while_another_worker_writes(old: bytes) -> bytes:
        other.set_secret("y", b"written meanwhile")
        return b"new-" + old

    with pytest.raises(MigrationConflict):
        await store.migrate_secrets(reencrypt_while_another_worker_writes, b"s", b"c")
    assert await store.get_secret("x") == b"x"
    with pytest.raises(ItemNotFound):
        await store.get_salt("default")


async def test_two_migrations_cannot_interleave(backend: Backend, store: Any) -> None:
    other = backend.sync_store()
    await store.set_secret("x", b"x")

    def reencrypt_while_another_migration_runs(old: bytes) -> bytes:
        assert other.migrate_secrets(lambda b: b"B-" + b, b"sB", b"cB") == 1
        return b"A-" + old

    with pytest.raises(MigrationConflict):
        await store.migrate_secrets(reencrypt_while_another_migration_runs, b"sA", b"cA")
    assert await store.get_secret("x") == b"B-x"
    assert await store.get_salt("default") == b"sB"


async def test_many_secrets_migrate_in_steps_all_at_once(backend: Backend, store: Any) -> None:
    core = store._core if hasattr(store, "_core") else store.sync._core
    core.limits.batch_messages = 3  # secrets staged 3 at a time
    for i in range(10):
        await store.set_secret(f"s{i}", f"old{i}".encode())
    n = await store.migrate_secrets(lambda b: b.replace(b"old", b"new"), b"salt2", b"check2")
    assert n == 10
    assert [await store.get_secret(f"s{i}") for i in range(10)] == [
        f"new{i}".encode() for i in range(10)
    ]
    assert await store.get_salt("default") == b"salt2"
    raw = backend.sync_client()
    assert not [k for k in raw.scan_iter(match=f"{backend.prefix}*") if b"#" in k]
