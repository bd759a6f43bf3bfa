"""The keys of an encrypted store: unlock with a passphrase, each session's own data key, and
the checks that keep a sealed session sealed. Generators of requests, like every operation
(sans-I/O); see :mod:`redis_session.crypto` for the formats and :mod:`.rekey` for rotation.

Unlocking opens the prefix's records (salt, key check, the master key's wrap). When they are
missing (evicted, or a new prefix), the store looks for a sealed session first and restores the
records from it (its salt and its copy of the master key's wrap), so no worker ever starts a
second master key while sealed sessions exist; only a prefix with no sealed session gets a new
one. A session's data key is opened from its meta field ``dk`` with the master key.
"""

from __future__ import annotations

import collections
import functools
import os
import time
from collections.abc import Callable
from typing import Any

from .. import codec, contracts, crypto
from ..crypto import CURRENT, NEXT, MasterKey, Opener, Passphrase, Sealer, SessionKey
from ..errors import (
    ConcurrentChange,
    CorruptData,
    PassphraseRequired,
    SessionNotEncrypted,
    TamperDetected,
    WrongPassphrase,
)
from ..keys import KeySchema
from ..options import StoreOptions
from ..status import Ctx, Status, check
from .index import Index
from .requests import Commands, Compute, Op

KEY_CACHE = 10_000
RECOVERY_SAMPLE = 100
"""Sessions a store looks at for a key record to restore a lost keyring from."""
RESTORE_KDF_TRIES = 4
"""Distinct salts a restore derives a key for at most (scrypt each: ~0.1 s)."""
UNKNOWN_KID = b"?"
"""The key id a store sends for a session whose key it does not know yet: never a real one,
so the script answers KEY_CHANGED with the session's key record before writing anything."""


def master_field(record: str) -> str:
    """The keyring field of the master key's wrap under passphrase record ``record``."""
    return f"mk:{record}"


def _now_us() -> int:
    return time.time_ns() // 1000


class Keyring:
    """A store's encryption state: its passphrase, the prefix's master key once unlocked, the
    sessions' data keys it opened and the metadata versions it saw.
    """

    def __init__(self, schema: KeySchema, options: StoreOptions, index: Index) -> None:
        self.schema = schema
        self.index = index
        self.passphrase = options.secret
        self.kdf_work = options.kdf_work
        self.master: MasterKey | None = None
        self.record = CURRENT
        self.masters: list[MasterKey] = []
        self._keks: dict[tuple[bytes, int, bytes], bytes] = {}
        self.session_keys: dict[str, SessionKey] = {}
        self.versions: dict[tuple[str, str], int] = {}

    @property
    def locked(self) -> bool:
        """Whether the store has a passphrase and has not opened the keyring yet."""
        return self.passphrase is not None and self.master is None

    def kek(self, passphrase: Passphrase, salt: bytes, work: int) -> Op[bytes]:
        """The KEK for these inputs; scrypt runs once per distinct salt and passphrase, as a
        :class:`Compute` request (off the event loop in the asyncio store).
        """
        tag = crypto.key_check(passphrase.reveal(), work)  # a cache key that hides the secret
        cached = self._keks.get((salt, work, tag))
        if cached is None:
            cached = yield Compute(functools.partial(crypto.derive_kek, passphrase, salt, work))
            self._keks[(salt, work, tag)] = cached
        return cached

    def records(self) -> Op[tuple[list[Any], list[Any], dict[bytes, bytes]]]:
        # A plain pipeline, not MULTI/EXEC: Redis refuses MULTI when it is out of memory, and a
        # store must open its keyring to read then. Scripts write these records atomically;
        # unlock() reads again when what it read does not fit together.
        schema = self.schema
        salts, checks, ring = yield Commands(
            [
                ("HMGET", schema.salts, CURRENT, NEXT),
                ("HMGET", schema.checksums, CURRENT, NEXT),
                ("HGETALL", schema.keyring),
            ]
        )
        return salts, checks, {bytes(f): bytes(v) for f, v in ring.items()}

    def unlock(self) -> Op[MasterKey]:
        """Open (or restore from a sealed session, or under a new prefix create) the keyring
        with the store's passphrase. Raises ``WrongPassphrase`` before anything else happens
        when it does not fit.
        """
        passphrase = self.passphrase
        if passphrase is None:
            raise PassphraseRequired("")
        for _ in range(3):
            salts, checks, ring = yield from self.records()
            if salts[0] is None and not ring:
                if not (yield from self._restore(passphrase)):
                    yield from self._create_keyring(passphrase)
                continue
            for record, salt, check_value in zip((CURRENT, NEXT), salts, checks, strict=True):
                if salt is None or check_value is None:
                    continue
                check_value = bytes(check_value)
                work = self.work_allowed(crypto.work_of(check_value))
                kek = yield from self.kek(passphrase, bytes(salt), work)
                if crypto.matches(kek, check_value):
                    master = self._master_key(ring, record, kek, bytes(salt), work)
                    self.record, self.master = record, master
                    return master
            raise WrongPassphrase()
        raise ConcurrentChange("keyring", "the keyring kept changing while it was opened")

    def work_allowed(self, work: int) -> int:
        """``work`` as a key-check record asks for it, if this store derives that much: a
        writer of the record could ask for 2**22 (gigabytes of memory per derivation).
        """
        if work > max(self.kdf_work, crypto.DEFAULT_WORK):
            raise CorruptData(
                "keyring",
                f"the key check asks for scrypt work {work}, more than this store's kdf_work="
                f"{self.kdf_work} allows: open it with kdf_work={work} if you set that",
            )
        return work

    def _master_key(
        self, ring: dict[bytes, bytes], record: str, kek: bytes, salt: bytes, work: int
    ) -> MasterKey:
        """The prefix's master key, from the keyring."""
        wrapped = ring.get(master_field(record).encode())
        if wrapped is None:
            raise CorruptData("keyring", f"the keyring holds no master key for {record!r}")
        master = crypto.unwrap_master_key(kek, salt, work, wrapped, self.schema.prefix)
        if master is None:
            raise CorruptData("keyring", "the master key does not open with this passphrase")
        self.remember_master(master)
        return master

    def remember_master(self, master: MasterKey) -> None:
        if all(m.raw != master.raw for m in self.masters):
            self.masters.append(master)

    def _create_keyring(self, passphrase: Passphrase) -> Op[None]:
        salt = os.urandom(16)
        kek = yield from self.kek(passphrase, salt, self.kdf_work)
        master = crypto.new_master_key(kek, salt, self.kdf_work, self.schema.prefix)
        yield from self.init_records(salt, crypto.key_check(kek, self.kdf_work), master)

    def init_records(self, salt: bytes, key_check: bytes, master: MasterKey) -> Op[None]:
        call = contracts.init_keyring(
            salts=self.schema.salts,
            checksums=self.schema.checksums,
            keyring=self.schema.keyring,
            record=CURRENT,
            salt=salt,
            key_check=key_check,
            master_wrap=master.wrapped,
        )
        reply = yield call
        if contracts.status(reply) != Status.EXISTS:
            check(reply, Ctx(name="keyring", keys=call.keys))

    def _restore(self, passphrase: Passphrase) -> Op[bool]:
        """The prefix's records are gone: restore them from a sealed session, if there is one
        (True), so that no worker starts a second master key; ``WrongPassphrase`` when there
        are sealed sessions and the passphrase opens none of them.
        """
        indexes = yield from self.index.indexes()
        if not indexes:
            return False
        pages = yield Commands([("ZREVRANGE", i, 0, RECOVERY_SAMPLE - 1) for i in indexes[:16]])
        keys = [codec.member_key(bytes(m)) for page in pages for m in page]
        if not keys:
            return False
        found = yield Commands([("HGET", self.schema.session(k).meta, "dk") for k in keys])
        records = [r for r in (crypto.parse_dk(bytes(dk)) for dk in found if dk) if r is not None]
        # Salts and work factors are a writer's choice: the sessions of a prefix share one
        # (two during a rotation), so the most common are tried first, a few at most, none
        # with more work than a store makes by default.
        pairs = collections.Counter((r.salt, r.master_wrap, r.work) for r in records)
        limit = max(self.kdf_work, crypto.DEFAULT_WORK)
        candidates = [p for p, _ in pairs.most_common() if p[2] <= limit]
        for salt, mk_wrap, work in candidates[:RESTORE_KDF_TRIES]:
            kek = yield from self.kek(passphrase, salt, work)
            master = crypto.unwrap_master_key(kek, salt, work, mk_wrap, self.schema.prefix)
            if master is not None:
                yield from self.init_records(salt, crypto.key_check(kek, work), master)
                return True
        if records:
            raise WrongPassphrase(
                "wrong passphrase: the prefix's keyring is gone and this passphrase opens none "
                "of its sealed sessions"
            )
        return False

    def session_key(self, owner: str, kid: bytes, dk: bytes) -> SessionKey:
        """Session ``owner``'s data key from its key record (``k``, ``dk``), cached."""
        cached = self.session_keys.get(owner)
        if cached is not None and cached.kid == kid:
            return cached
        record = crypto.parse_dk(dk)
        if record is None:
            raise TamperDetected(owner, "its data key record is not one this store writes")
        dek_wrap = record.key_wrap
        for master in self.masters:
            key = crypto.open_session_key(master, dek_wrap, self.schema.prefix, owner, kid)
            if key is not None:
                return self._remember_session(owner, key)
        # A prefix has one master key (a lost keyring is restored, never replaced), so a
        # record that does not open with it is foreign. No scrypt for it: its salt and work
        # factor are a writer's choice (a work of 22 would take gigabytes).
        raise TamperDetected(
            owner, "its data key does not open with the prefix's master key (moved or altered)"
        )

    def _remember_session(self, owner: str, key: SessionKey) -> SessionKey:
        if len(self.session_keys) >= KEY_CACHE:
            self.session_keys.clear()
        self.session_keys[owner] = key
        return key

    def new_session(self, owner: str) -> tuple[Sealer, bytes, bytes]:
        """A new sealed session's sealer, key id and key record (a fresh data key)."""
        assert self.master is not None
        kid, dek = crypto.new_session_key()
        dk = crypto.make_dk(self.master, self.schema.prefix, owner, kid, dek)
        key = self._remember_session(owner, crypto.session_key(kid, dek))
        return self.sealer_of(owner, key), kid, dk

    def sealer_of(self, owner: str, key: SessionKey) -> Sealer:
        return Sealer(
            key.kid, owner, prefix=self.schema.prefix, session_key=key,
            versions=functools.partial(self.next_version, owner),
        )  # fmt: skip

    def next_version(self, owner: str, name: str) -> int:
        """The version a write gives metadata entry ``name``: newer than any this store saw."""
        return max(_now_us(), self.versions.get((owner, name), 0) + 1)

    def saw_version(self, owner: str, name: str, version: int) -> None:
        """A metadata value read: refuse one older than a value of it already read."""
        known = self.versions.get((owner, name), 0)
        if version < known:
            raise TamperDetected(
                owner, f"metadata {name!r} is older than a value of it read before (rolled back)"
            )
        if len(self.versions) >= KEY_CACHE:
            self.versions.clear()
        self.versions[(owner, name)] = version

    def sealer(self, owner: str) -> Sealer | None:
        """What seals content added to session ``owner`` (None without a passphrase)."""
        if self.passphrase is None:
            return None
        key = self.session_keys.get(owner)
        if key is not None:
            return self.sealer_of(owner, key)
        return Sealer(UNKNOWN_KID, owner)  # the script answers with the session's key

    def follow(self, owner: str, kid: bytes, dk: bytes) -> Op[None]:
        """After ``KEY_CHANGED``: seal writes to ``owner`` with its key (``kid``, ``dk``)."""
        if self.passphrase is None:
            raise PassphraseRequired(owner)
        if not kid:
            raise SessionNotEncrypted(owner)
        if self.master is None:
            yield from self.unlock()
        self.session_keys.pop(owner, None)
        if not dk:
            raise TamperDetected(owner, "it names a key id but holds no data key record")
        self.session_key(owner, kid, dk)

    def opened(
        self, owner: str, kid: Any, dk: Any, decode: Callable[[Opener | None], Any]
    ) -> Op[Any]:
        """``decode(opener)`` for session ``owner`` with key record ``kid``, ``dk`` (as read;
        ``None`` without a passphrase: sealed data then raises ``PassphraseRequired``).
        """
        if self.passphrase is None:
            return decode(None)
        if self.master is None:
            yield from self.unlock()
        kid, dk = bytes(kid or b""), bytes(dk or b"")
        if kid and not dk:
            raise TamperDetected(owner, "it names a key id but holds no data key record")
        return decode(self.opener(owner, self.session_key(owner, kid, dk) if dk else None))

    def opener(self, owner: str, key: SessionKey | None) -> Opener:
        return Opener(owner, self.schema.prefix, key, functools.partial(self.saw_version, owner))

    def written(self, owner: str, decode: Callable[[Opener | None], Any]) -> Op[Any]:
        """``decode(opener)`` of what a write to ``owner`` just answered, with the key that
        write sealed with (the script checked it is the session's).
        """
        if self.passphrase is None:
            return decode(None)
        key = self.session_keys.get(owner)
        if key is not None:
            return decode(self.opener(owner, key))
        return (yield from self.opened(owner, b"", b"", decode))
