"""The keys of an encrypted store: unlock with a passphrase, each session's own data key, the
checks that keep a sealed session sealed, and passphrase rotation.

A mixin of :class:`~redis_session._core.Core`; like every operation there, these are
generators of requests (sans-I/O). See :mod:`redis_session.crypto` for the formats.

Unlocking opens the prefix's records (salt, key check, the master key's wrap). When they are
missing (evicted, or a new prefix), the store looks for a sealed session first and restores the
records from it (its salt and its copy of the master key's wrap), so no worker ever starts a
second master key while sealed sessions exist; only a prefix with no sealed session gets a new
one. A session's data key is opened from its meta field ``dk`` with the master key (or, for a
session sealed under another master key, with the passphrase and the salt beside it).

Rotation (``rekey``), online and resumable:

1. ``begin_rekey``: a new passphrase record (``passphrase.next``), and the master key wrapped
   under it too: workers holding either passphrase open everything during the rotation.
2. For every session: a sealed one gets its copy of the master key's wrap under the new
   passphrase (``rekey_session``, only if its key is still what was read); one in cleartext
   gets sealed: its own data key first (writers follow it at once, flagged "move pending" so
   that its cleartext values still read), then its values sealed in steps of a bounded size
   (``reseal_session``, each value swapped only if unchanged), then the flag cleared.
   Passes repeat until one finds nothing left to do; ``rekey`` again resumes.
3. ``finish_rekey``: the next passphrase becomes the passphrase; the wraps under the old one are
   dropped, so the old passphrase opens nothing any more. (A worker still running with the old
   passphrase holds the master key and keeps working; sessions it creates carry a copy of the
   wrap under the old passphrase until the next ``rekey``: restart workers with the new one.)
"""

from __future__ import annotations

import collections
import functools
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from . import codec, crypto
from ._requests import Commands, Compute, Op, ScriptCall
from .crypto import CURRENT, NEXT, MasterKey, Opener, Passphrase, Sealer, SessionKey
from .errors import (
    ConcurrentChange,
    CorruptData,
    InvalidArgument,
    PassphraseRequired,
    SessionNotEncrypted,
    TamperDetected,
    WrongPassphrase,
)
from .keys import KeySchema
from .status import Ctx, Status, check

REKEY_PASSES = 8
RESEAL_ATTEMPTS = 8
KEY_CACHE = 10_000
RECOVERY_SAMPLE = 100
"""Sessions a store looks at for a key record to restore a lost keyring from."""
RESTORE_KDF_TRIES = 4
"""Distinct salts a restore derives a key for at most (scrypt each: ~0.1 s)."""
UNKNOWN_KID = b"?"
"""The key id a store sends for a session whose key it does not know yet: never a real one,
so the script answers KEY_CHANGED with the session's key record before writing anything."""
RESEAL_STEP = 500
"""Values one reseal_session call replaces at most."""


@dataclass(frozen=True, slots=True)
class RekeyProgress:
    """Where a ``rekey`` is: sessions looked at of those listed in this pass, and how many
    values (messages, metadata values) were re-sealed so far.
    """

    sessions_done: int
    sessions_total: int
    values_resealed: int
    pass_number: int


@dataclass(frozen=True, slots=True)
class RekeyReport:
    """What a finished ``rekey`` did."""

    sessions_resealed: int
    values_resealed: int
    passes: int
    resumed: bool


def _mk_field(record: str) -> str:
    return f"mk:{record}"


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _now_us() -> int:
    return time.time_ns() // 1000


class KeyringOps:
    """Encryption state and operations of a store (mixed into ``Core``)."""

    schema: KeySchema
    read_budget: int

    def _init_crypto(self, passphrase: str | bytes | None, kdf_work: int) -> None:
        self.passphrase = None if passphrase is None else Passphrase(passphrase)
        self.kdf_work = crypto.check_work(kdf_work)
        self.master: MasterKey | None = None
        self.record = CURRENT
        self._masters: list[MasterKey] = []
        self._keks: dict[tuple[bytes, int, bytes], bytes] = {}
        self._session_keys: dict[str, SessionKey] = {}
        self._versions: dict[tuple[str, str], int] = {}

    @property
    def locked(self) -> bool:
        """Whether the store has a passphrase and has not opened the keyring yet."""
        return self.passphrase is not None and self.master is None

    def _kek(self, passphrase: Passphrase, salt: bytes, work: int) -> Op[bytes]:
        """The KEK for these inputs; scrypt runs once per distinct salt and passphrase, as a
        :class:`Compute` request (off the event loop in the asyncio store).
        """
        tag = crypto.key_check(passphrase.reveal(), work)  # a cache key that hides the secret
        cached = self._keks.get((salt, work, tag))
        if cached is None:
            cached = yield Compute(functools.partial(crypto.derive_kek, passphrase, salt, work))
            self._keks[(salt, work, tag)] = cached
        return cached

    def _records(self) -> Op[tuple[list[Any], list[Any], dict[bytes, bytes]]]:
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
            salts, checks, ring = yield from self._records()
            if salts[0] is None and not ring:
                if not (yield from self._restore(passphrase)):
                    yield from self._create_keyring(passphrase)
                continue
            for record, salt, check_value in zip((CURRENT, NEXT), salts, checks, strict=True):
                if salt is None or check_value is None:
                    continue
                check_value = bytes(check_value)
                work = self._work_allowed(crypto.work_of(check_value))
                kek = yield from self._kek(passphrase, bytes(salt), work)
                if crypto.matches(kek, check_value):
                    master = self._master_key(ring, record, kek, bytes(salt), work)
                    self.record, self.master = record, master
                    return master
            raise WrongPassphrase()
        raise ConcurrentChange("keyring", "the keyring kept changing while it was opened")

    def _work_allowed(self, work: int) -> int:
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
        wrapped = ring.get(_mk_field(record).encode())
        if wrapped is None:
            raise CorruptData("keyring", f"the keyring holds no master key for {record!r}")
        master = crypto.unwrap_master_key(kek, salt, work, wrapped, self.schema.prefix)
        if master is None:
            raise CorruptData("keyring", "the master key does not open with this passphrase")
        self._remember_master(master)
        return master

    def _remember_master(self, master: MasterKey) -> None:
        if all(m.raw != master.raw for m in self._masters):
            self._masters.append(master)

    def _create_keyring(self, passphrase: Passphrase) -> Op[None]:
        salt = os.urandom(16)
        kek = yield from self._kek(passphrase, salt, self.kdf_work)
        master = crypto.new_master_key(kek, salt, self.kdf_work, self.schema.prefix)
        yield from self._init_records(salt, crypto.key_check(kek, self.kdf_work), master)

    def _init_records(self, salt: bytes, key_check: bytes, master: MasterKey) -> Op[None]:
        keys = [self.schema.salts, self.schema.checksums, self.schema.keyring]
        reply = yield ScriptCall("init_keyring", keys, (CURRENT, salt, key_check, master.wrapped))
        if reply[0] != Status.EXISTS:
            check(reply, Ctx(name="keyring", keys=keys))

    def _restore(self, passphrase: Passphrase) -> Op[bool]:
        """The prefix's records are gone: restore them from a sealed session, if there is one
        (True), so that no worker starts a second master key; ``WrongPassphrase`` when there
        are sealed sessions and the passphrase opens none of them.
        """
        indexes = yield from self._indexes()
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
        pairs = collections.Counter((salt, mk_wrap, work) for salt, work, mk_wrap, _ in records)
        limit = max(self.kdf_work, crypto.DEFAULT_WORK)
        candidates = [p for p, _ in pairs.most_common() if p[2] <= limit]
        for salt, mk_wrap, work in candidates[:RESTORE_KDF_TRIES]:
            kek = yield from self._kek(passphrase, salt, work)
            master = crypto.unwrap_master_key(kek, salt, work, mk_wrap, self.schema.prefix)
            if master is not None:
                yield from self._init_records(salt, crypto.key_check(kek, work), master)
                return True
        if records:
            raise WrongPassphrase(
                "wrong passphrase: the prefix's keyring is gone and this passphrase opens none "
                "of its sealed sessions"
            )
        return False

    # -- each session's own key -------------------------------------------------------------

    def _session_key(self, owner: str, kid: bytes, dk: bytes) -> SessionKey:
        """Session ``owner``'s data key from its key record (``k``, ``dk``), cached."""
        cached = self._session_keys.get(owner)
        if cached is not None and cached.kid == kid:
            return cached
        record = crypto.parse_dk(dk)
        if record is None:
            raise TamperDetected(owner, "its data key record is not one this store writes")
        dek_wrap = record[3]
        for master in self._masters:
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
        if len(self._session_keys) >= KEY_CACHE:
            self._session_keys.clear()
        self._session_keys[owner] = key
        return key

    def _new_session(self, owner: str) -> tuple[Sealer, bytes, bytes]:
        """A new sealed session's sealer, key id and key record (a fresh data key)."""
        assert self.master is not None
        kid, dek = crypto.new_session_key()
        dk = crypto.make_dk(self.master, self.schema.prefix, owner, kid, dek)
        key = self._remember_session(owner, crypto.session_key(kid, dek))
        return self._sealer_of(owner, key), kid, dk

    def _sealer_of(self, owner: str, key: SessionKey) -> Sealer:
        return Sealer(
            key.kid, owner, prefix=self.schema.prefix, session_key=key,
            versions=functools.partial(self._next_version, owner),
        )  # fmt: skip

    def _next_version(self, owner: str, name: str) -> int:
        """The version a write gives metadata entry ``name``: newer than any this store saw."""
        return max(_now_us(), self._versions.get((owner, name), 0) + 1)

    def _saw_version(self, owner: str, name: str, version: int) -> None:
        """A metadata value read: refuse one older than a value of it already read."""
        known = self._versions.get((owner, name), 0)
        if version < known:
            raise TamperDetected(
                owner, f"metadata {name!r} is older than a value of it read before (rolled back)"
            )
        if len(self._versions) >= KEY_CACHE:
            self._versions.clear()
        self._versions[(owner, name)] = version

    def _sealer(self, owner: str) -> Sealer | None:
        """What seals content added to session ``owner`` (None without a passphrase)."""
        if self.passphrase is None:
            return None
        key = self._session_keys.get(owner)
        if key is not None:
            return self._sealer_of(owner, key)
        return Sealer(UNKNOWN_KID, owner)  # the script answers with the session's key

    def _follow(self, owner: str, kid: bytes, dk: bytes) -> Op[None]:
        """After ``KEY_CHANGED``: seal writes to ``owner`` with its key (``kid``, ``dk``)."""
        if self.passphrase is None:
            raise PassphraseRequired(owner)
        if not kid:
            raise SessionNotEncrypted(owner)
        if self.master is None:
            yield from self.unlock()
        self._session_keys.pop(owner, None)
        if not dk:
            raise TamperDetected(owner, "it names a key id but holds no data key record")
        self._session_key(owner, kid, dk)

    def _opened(
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
        return decode(self._opener(owner, self._session_key(owner, kid, dk) if dk else None))

    def _opener(self, owner: str, key: SessionKey | None) -> Opener:
        return Opener(owner, self.schema.prefix, key, functools.partial(self._saw_version, owner))

    def _written(self, owner: str, decode: Callable[[Opener | None], Any]) -> Op[Any]:
        """``decode(opener)`` of what a write to ``owner`` just answered, with the key that
        write sealed with (the script checked it is the session's).
        """
        if self.passphrase is None:
            return decode(None)
        key = self._session_keys.get(owner)
        if key is not None:
            return decode(self._opener(owner, key))
        return (yield from self._opened(owner, b"", b"", decode))

    # -- rotation ---------------------------------------------------------------------------

    def rekey(
        self,
        new_passphrase: str | bytes,
        batch_size: int = 100,
        progress: Callable[[RekeyProgress], object] | None = None,
    ) -> Op[RekeyReport]:
        """Rotate to ``new_passphrase`` (see the module docstring)."""
        new = Passphrase(new_passphrase)
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidArgument("batch_size", f"must be an int >= 1, got {batch_size!r}")
        if progress is not None and not callable(progress):
            raise InvalidArgument("progress", "must be callable or None")
        if self.passphrase is None:
            raise InvalidArgument("passphrase", "rekey needs a store opened with a passphrase")
        yield from self.unlock()
        assert self.master is not None
        salts, checks, ring = yield from self._records()
        prefix = self.schema.prefix
        resumed = salts[1] is not None
        if resumed:
            next_salt = bytes(salts[1])
            check_next = bytes(checks[1])
            work_next = self._work_allowed(crypto.work_of(check_next))
            kek_next = yield from self._kek(new, next_salt, work_next)
            if not crypto.matches(kek_next, check_next):
                raise WrongPassphrase(
                    "a rotation to another passphrase is under way: finish it with that one"
                )
            wrapped = ring.get(_mk_field(NEXT).encode(), b"")
            master_next = crypto.unwrap_master_key(kek_next, next_salt, work_next, wrapped, prefix)
            if master_next is None:
                raise CorruptData("keyring", "the rotation's master key does not open")
        else:
            next_salt, work_next = os.urandom(16), self.kdf_work
            kek_next = yield from self._kek(new, next_salt, work_next)
            master_next = crypto.rewrap_master_key(
                self.master.raw, kek_next, next_salt, work_next, prefix
            )
            keys = [self.schema.salts, self.schema.checksums, self.schema.keyring]
            args = (
                NEXT, next_salt, crypto.key_check(kek_next, work_next), _mk_field(NEXT),
                master_next.wrapped,
            )  # fmt: skip
            reply = yield ScriptCall("begin_rekey", keys, args)
            if reply[0] == Status.CONFLICT:
                raise ConcurrentChange("keyring", "another rotation began first")
            check(reply, Ctx(name="keyring", keys=keys))
        self._remember_master(master_next)
        sessions = values = 0
        for number in range(1, REKEY_PASSES + 1):
            listed = yield from self._all_sessions()
            done = pending_here = 0
            for chunk in _chunks(listed, batch_size):
                states = yield Commands(
                    [("HMGET", self.schema.session(k).meta, "v", "k", "dk") for k in chunk]
                )
                for key, (version, kid, dk) in zip(chunk, states, strict=True):
                    if version is None:
                        continue
                    record = crypto.parse_dk(bytes(dk or b""))
                    if record is not None and record[2] == master_next.wrapped:
                        key_now = self._session_key(key, bytes(kid), bytes(dk))
                        if not key_now.pending:
                            continue  # rewrapped already, nothing left to seal
                    pending_here += 1
                    values += yield from self._move_session(key, master_next)
                    sessions += 1
                done += len(chunk)
                if progress is not None:
                    progress(RekeyProgress(done, len(listed), values, number))
            if not pending_here:
                break
        else:
            raise ConcurrentChange("keyring", "sessions kept appearing under an older key")
        keys = [self.schema.salts, self.schema.checksums, self.schema.keyring]
        reply = yield ScriptCall("finish_rekey", keys, (CURRENT, NEXT, next_salt))
        if reply[0] == Status.CONFLICT:
            raise ConcurrentChange("keyring", "the rotation was finished or undone meanwhile")
        check(reply, Ctx(name="keyring", keys=keys))
        self.passphrase = new
        self.master, self._masters = None, []
        self._session_keys.clear()
        yield from self.unlock()
        return RekeyReport(sessions, values, number, resumed)

    def _all_sessions(self) -> Op[list[str]]:
        indexes = yield from self._indexes()
        if not indexes:
            return []
        pages = yield Commands([("ZRANGE", i, 0, -1) for i in indexes])
        return [codec.decode_key(m) for page in pages for m in page]

    def _indexes(self) -> Op[list[str]]:
        raise NotImplementedError  # pragma: no cover (Core's)

    def _move_session(self, key: str, master: MasterKey) -> Op[int]:
        """Give session ``key`` a key record under ``master``'s wrap: a sealed session keeps
        its data key; one in cleartext gets one of its own, then its values sealed in steps.
        Returns how many values were re-sealed.
        """
        sk = self.schema.session(key)
        prefix = self.schema.prefix
        for _ in range(RESEAL_ATTEMPTS):
            (state,) = yield Commands([("HMGET", sk.meta, "v", "k", "dk")])
            version, kid, dk = state
            if version is None:
                return 0
            kid, dk = bytes(kid or b""), bytes(dk or b"")
            if kid or dk:
                current = self._session_key(key, kid, dk)
                new_kid, dek, pending = kid, current.raw, current.pending
                from_cleartext = current.from_cleartext
            else:
                new_kid, dek = crypto.new_session_key()
                pending, from_cleartext = True, True
            new_dk = crypto.make_dk(master, prefix, key, new_kid, dek, pending, from_cleartext)
            reply = yield ScriptCall("rekey_session", [sk.meta], (kid, dk, new_kid, new_dk))
            if reply[0] == Status.NOT_FOUND:
                return 0
            if reply[0] == Status.CONFLICT:
                continue
            check(reply, Ctx(key, [sk.meta]))
            self._session_keys.pop(key, None)
            if not pending:
                return 0
            target = self._session_key(key, new_kid, new_dk)
            resealed = yield from self._reseal(key, target)
            done_dk = crypto.make_dk(master, prefix, key, new_kid, dek, False)
            reply = yield ScriptCall(
                "rekey_session", [sk.meta], (new_kid, new_dk, new_kid, done_dk)
            )
            if reply[0] == Status.CONFLICT:
                continue
            check(reply, Ctx(key, [sk.meta]))
            self._session_keys.pop(key, None)
            return resealed
        raise ConcurrentChange(key, "its key kept changing while it was moved to a new one")

    def _reseal(self, key: str, target: SessionKey) -> Op[int]:
        """Re-seal everything session ``key`` (and its children) hold under ``target``, in
        steps; values sealed so already (written since the move began) are left alone.
        """
        sk = self.schema.session(key)
        sealer = self._sealer_of(key, target)
        (members,) = yield Commands([("ZRANGE", sk.kids, 0, -1)])
        lists = [(sk.meta, sk.msgs, 0)]
        for m in members:
            ck = self.schema.child(codec.member_key(bytes(m)))
            lists.append((ck.meta, ck.msgs, 8))
        replaced = 0
        for owner_meta, list_key, skip in lists:
            replaced += yield from self._reseal_list(key, owner_meta, list_key, skip, sealer)
        (meta,) = yield Commands([("HGETALL", sk.meta)])
        quads = yield from self._reseal_fields(
            key, {bytes(f): bytes(v) for f, v in meta.items()}, sealer
        )
        if quads:
            args: list[bytes | str | int] = [target.kid, "", 0, len(quads) // 4, *quads]
            reply = yield ScriptCall("reseal_session", [sk.meta, sk.meta, sk.msgs], args)
            if reply[0] not in (Status.NOT_FOUND, Status.CONFLICT):
                replaced += int(check(reply, Ctx(key, [sk.meta]))[1])
        return replaced

    def _reseal_list(
        self, key: str, owner_meta: str, list_key: str, skip: int, sealer: Sealer
    ) -> Op[int]:
        """Re-seal one list of session ``key`` in steps (a child's elements start with
        ``skip`` = 8 digest bytes); a list that began a new generation meanwhile is read again.
        """
        replaced = 0
        for _ in range(RESEAL_ATTEMPTS):
            (state,) = yield Commands([("HMGET", owner_meta, "g", "h", "n")])
            g = bytes(state[0] or b"0")
            (length,) = yield Commands([("LLEN", list_key)])
            h = int(state[1] or 0) if state[2] is not None else 0
            n = int(state[2]) if state[2] is not None else int(length)
            at, stale = h, False
            while at < n and not stale:
                part = yield ScriptCall(
                    "read_range",
                    (owner_meta, list_key),
                    (g, at, n, self.read_budget),
                    write=False,
                )
                if part[0] == Status.STALE:
                    stale = True
                    break
                items = [bytes(i) for i in check(part, Ctx(key))[1]]
                triples: list[Any] = []
                for offset, item in enumerate(items):
                    new = self._reseal_element(key, item, skip, sealer, at + offset)
                    if new is not None:
                        triples += (at + offset, item, new)
                for i in range(0, len(triples), 3 * RESEAL_STEP):
                    run = triples[i : i + 3 * RESEAL_STEP]
                    args = (sealer.kid, g, len(run) // 3, *run, 0)
                    reply = yield ScriptCall(
                        "reseal_session",
                        [self.schema.session(key).meta, owner_meta, list_key],
                        args,
                    )
                    if reply[0] in (Status.CONFLICT, Status.NOT_FOUND):
                        stale = True
                        break
                    check(reply, Ctx(key))
                    replaced += int(reply[1])
                    g = (
                        bytes(str(reply[2]).encode())
                        if not isinstance(reply[2], bytes)
                        else reply[2]
                    )
                at = int(part[2])
            if not stale:
                return replaced
        raise ConcurrentChange(key, "its history kept changing while it was re-sealed")

    def _reseal_element(
        self, owner: str, item: bytes, skip: int, sealer: Sealer, position: int
    ) -> bytes | None:
        """``item`` re-sealed by ``sealer`` (None when it is sealed so already)."""
        head, element = item[:skip], item[skip:]
        if crypto.split_element(element) is not None:
            return None
        if not _from_cleartext(sealer):
            raise TamperDetected(
                owner, f"message {position} is in cleartext in a sealed session: not sealed"
            )
        return head + sealer.message(_cleartext_id(owner, element), element)

    def _reseal_fields(
        self, owner: str, meta: dict[bytes, bytes], sealer: Sealer
    ) -> Op[list[bytes]]:
        """Old/new quads for the metadata values and scalar fields not sealed in this layout."""
        out: list[bytes] = []
        if self.master is None:
            yield from self.unlock()
        for field, value in meta.items():
            if field.startswith(b"m:"):
                if not _from_cleartext(sealer):
                    name = field[2:].decode("utf-8", "replace")
                    raise TamperDetected(
                        owner, f"metadata {name!r} is in cleartext in a sealed session: not sealed"
                    )
                plain = value
            elif (
                field.decode("utf-8", "replace") in codec.SCALAR_FIELDS
                and value
                and not crypto.is_sealed_scalar(value)
            ):
                name = field.decode()
                out += (field, value, field, sealer.scalar(name, value))
                continue
            else:
                continue
            name = field[2:].decode("utf-8", "replace")
            out += (field, value, b"e:" + field[2:], sealer.meta(name, plain))
        return out


def _from_cleartext(sealer: Sealer) -> bool:
    """Whether the session ``sealer`` re-seals was in cleartext (its cleartext is its own)."""
    return sealer.session_key is not None and sealer.session_key.from_cleartext


def _cleartext_id(key: str, element: bytes) -> str:
    end = element.find(b'",', 7)
    if element[:7] != b'{"id":"' or end < 0:
        raise CorruptData(key, "a stored message does not start with its id")
    return element[7:end].decode("ascii", "replace")
