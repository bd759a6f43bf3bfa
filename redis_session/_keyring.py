"""The keyring's operations: unlock with a passphrase, follow a session's key, rotate keys.

A mixin of :class:`~redis_session._core.Core`; like every operation there, these are
generators of requests (sans-I/O). See :mod:`redis_session.crypto` for the formats.

Rotation (``rekey``), online and resumable:

1. ``begin_rekey``: a new passphrase record (``passphrase.next``) and a new data key, which
   becomes the key new sessions are sealed with. Every data key is wrapped under both
   passphrases, so workers holding either one read everything during the rotation.
2. For every session whose key id is not the new one, or whose re-seal is pending:
   ``rekey_session`` switches it to the new key id (writers follow at once), then its elements,
   its children's elements and its metadata values are re-sealed and swapped in by
   ``reseal_session``, each only if unchanged since read. Passes repeat until one finds nothing
   left to do. A crash anywhere leaves every value readable; ``rekey`` again resumes.
3. ``finish_rekey``: the next passphrase becomes the passphrase; the keys wrapped under the old
   one are dropped, so the old passphrase opens nothing any more.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from . import codec, crypto
from ._requests import Commands, Compute, Op, ScriptCall
from .crypto import CURRENT, NEXT, Keyring, Passphrase, Sealer
from .errors import (
    ConcurrentChange,
    CorruptData,
    InvalidArgument,
    KeyUnavailable,
    PassphraseRequired,
    SessionNotEncrypted,
    WrongPassphrase,
)
from .keys import KeySchema
from .status import Ctx, Status, check

REKEY_PASSES = 8
RESEAL_ATTEMPTS = 8
KID_CACHE = 10_000


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


def _dek_field(kid: bytes, record: str) -> str:
    return f"dek:{kid.hex()}:{record}"


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class KeyringOps:
    """Encryption state and operations of a store (mixed into ``Core``)."""

    schema: KeySchema

    def _init_crypto(self, passphrase: str | bytes | None, kdf_work: int) -> None:
        self.passphrase = None if passphrase is None else Passphrase(passphrase)
        self.kdf_work = crypto.check_work(kdf_work)
        self.keyring: Keyring | None = None
        self._keks: dict[tuple[bytes, int, bytes], bytes] = {}
        self._session_kids: dict[str, bytes] = {}

    @property
    def locked(self) -> bool:
        """Whether the store has a passphrase and has not opened the keyring yet."""
        return self.passphrase is not None and self.keyring is None

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

    def unlock(self) -> Op[Keyring]:
        """Open (or, under a new prefix, create) the keyring with the store's passphrase.

        Raises ``WrongPassphrase`` before anything else happens when it does not fit.
        """
        passphrase = self.passphrase
        if passphrase is None:
            raise PassphraseRequired("")
        for _ in range(3):
            salts, checks, ring = yield from self._records()
            if salts[0] is None and not ring:
                yield from self._create_keyring(passphrase)
                continue
            for record, salt, check_value in zip((CURRENT, NEXT), salts, checks, strict=True):
                if salt is None or check_value is None:
                    continue
                check_value = bytes(check_value)
                kek = yield from self._kek(passphrase, bytes(salt), crypto.work_of(check_value))
                if crypto.matches(kek, check_value):
                    self.keyring = self._open_ring(ring, record, kek)
                    self.record = record
                    return self.keyring
            raise WrongPassphrase()
        raise ConcurrentChange("keyring", "the keyring kept changing while it was opened")

    def _open_ring(self, ring: dict[bytes, bytes], record: str, kek: bytes) -> Keyring:
        current = ring.get(b"current")
        if current is None:
            raise CorruptData("keyring", "the keyring names no current key")
        keyring = Keyring(current=bytes.fromhex(current.decode()))
        suffix = f":{record}".encode()
        for field, wrapped in ring.items():
            if field.startswith(b"dek:") and field.endswith(suffix):
                kid = bytes.fromhex(field[4 : -len(suffix)].decode())
                keyring.add(kid, crypto.unwrap(kek, kid, wrapped))
        if keyring.current not in keyring.keys:
            raise CorruptData("keyring", "the current data key is not wrapped for this passphrase")
        return keyring

    def _create_keyring(self, passphrase: Passphrase) -> Op[None]:
        salt = os.urandom(16)
        kek = yield from self._kek(passphrase, salt, self.kdf_work)
        kid, dek = os.urandom(crypto.KID_LEN), os.urandom(32)
        keys = [self.schema.salts, self.schema.checksums, self.schema.keyring]
        args = (
            CURRENT, salt, crypto.key_check(kek, self.kdf_work), kid.hex(),
            _dek_field(kid, CURRENT), crypto.wrap(kek, kid, dek),
        )  # fmt: skip
        reply = yield ScriptCall("init_keyring", keys, args)
        if reply[0] != Status.EXISTS:
            check(reply, Ctx(name="keyring", keys=keys))

    # -- sealing and opening ----------------------------------------------------------------

    def _sealer(self, owner: str) -> Sealer | None:
        """What seals content added to session ``owner`` (None without a passphrase)."""
        keyring = self.keyring
        if keyring is None:
            return None
        return Sealer(keyring, self._session_kids.get(owner, keyring.current), owner)

    def _follow(self, owner: str, kid: bytes) -> Op[None]:
        """After ``KEY_CHANGED``: seal writes to ``owner`` with key ``kid`` from now on."""
        if self.passphrase is None:
            raise PassphraseRequired(owner)
        if not kid:
            raise SessionNotEncrypted(owner)
        if self.keyring is None or kid not in self.keyring.keys:
            yield from self.unlock()
        assert self.keyring is not None
        if kid not in self.keyring.keys:
            raise KeyUnavailable(kid.hex())
        if len(self._session_kids) >= KID_CACHE:
            self._session_kids.clear()
        self._session_kids[owner] = kid

    def _opened(self, decode: Callable[[Keyring | None], Any]) -> Op[Any]:
        """``decode(keyring)``; a key id the keyring lacks reloads it once (a rotation began)."""
        try:
            return decode(self.keyring)
        except KeyUnavailable:
            if self.passphrase is None:
                raise
        yield from self.unlock()
        return decode(self.keyring)

    # -- rotation ---------------------------------------------------------------------------

    def rekey(
        self,
        new_passphrase: str | bytes,
        batch_size: int = 100,
        progress: Callable[[RekeyProgress], object] | None = None,
    ) -> Op[RekeyReport]:
        """Rotate to ``new_passphrase`` and a new data key (see the module docstring)."""
        new = Passphrase(new_passphrase)
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidArgument("batch_size", f"must be an int >= 1, got {batch_size!r}")
        if progress is not None and not callable(progress):
            raise InvalidArgument("progress", "must be callable or None")
        if self.passphrase is None:
            raise InvalidArgument("passphrase", "rekey needs a store opened with a passphrase")
        keyring = yield from self.unlock()
        salts, checks, _ = yield from self._records()
        resumed = salts[1] is not None
        if resumed:
            next_salt = bytes(salts[1])
            check_next = bytes(checks[1])
            kek_next = yield from self._kek(new, next_salt, crypto.work_of(check_next))
            if not crypto.matches(kek_next, check_next):
                raise WrongPassphrase(
                    "a rotation to another passphrase is under way: finish it with that one"
                )
        else:
            next_salt = os.urandom(16)
            kek_next = yield from self._kek(new, next_salt, self.kdf_work)
            kid, dek = crypto.new_kid(keyring.keys), os.urandom(32)
            pairs: list[str | bytes] = []
            for old_kid, old_dek in keyring.raw.items():
                pairs += (_dek_field(old_kid, NEXT), crypto.wrap(kek_next, old_kid, old_dek))
            pairs += (_dek_field(kid, NEXT), crypto.wrap(kek_next, kid, dek))
            own = yield from self._kek(self.passphrase, *self._own_record(salts, checks))
            pairs += (_dek_field(kid, self.record), crypto.wrap(own, kid, dek))
            keys = [self.schema.salts, self.schema.checksums, self.schema.keyring]
            args = (
                keyring.current.hex(), kid.hex(), NEXT, next_salt,
                crypto.key_check(kek_next, self.kdf_work), *pairs,
            )  # fmt: skip
            reply = yield ScriptCall("begin_rekey", keys, args)
            if reply[0] == Status.CONFLICT:
                raise ConcurrentChange("keyring", "another rotation began first")
            check(reply, Ctx(name="keyring", keys=keys))
        keyring = yield from self.unlock()
        target = keyring.current
        sessions = values = 0
        for number in range(1, REKEY_PASSES + 1):
            listed = yield from self._all_sessions()
            done = pending_here = 0
            for chunk in _chunks(listed, batch_size):
                states = yield Commands(
                    [("HMGET", self.schema.session(k).meta, "v", "k", "r") for k in chunk]
                )
                for key, (version, kid, mark) in zip(chunk, states, strict=True):
                    if version is not None and (kid is None or bytes(kid) != target or mark):
                        pending_here += 1
                        values += yield from self._reseal(key, target)
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
        self.keyring = None
        yield from self.unlock()
        return RekeyReport(sessions, values, number, resumed)

    def _own_record(self, salts: list[Any], checks: list[Any]) -> tuple[bytes, int]:
        i = 0 if self.record == CURRENT else 1
        return bytes(salts[i]), crypto.work_of(bytes(checks[i]))

    def _all_sessions(self) -> Op[list[str]]:
        indexes = yield from self._indexes()
        if not indexes:
            return []
        pages = yield Commands([("ZRANGE", i, 0, -1) for i in indexes])
        return [codec.decode_key(m) for page in pages for m in page]

    def _indexes(self) -> Op[list[str]]:
        raise NotImplementedError  # pragma: no cover (Core's)

    def _reseal(self, key: str, target: bytes) -> Op[int]:
        """Switch session ``key`` to key ``target`` and re-seal all it holds; values replaced."""
        sk = self.schema.session(key)
        for _ in range(RESEAL_ATTEMPTS):
            reply = yield ScriptCall("rekey_session", [sk.meta], (target,))
            if reply[0] == Status.NOT_FOUND:
                return 0
            check(reply, Ctx(key, [sk.meta]))
            meta, items, kids = yield Commands(
                [("HGETALL", sk.meta), ("LRANGE", sk.msgs, 0, -1), ("ZRANGE", sk.kids, 0, -1)],
                transaction=True,
            )
            if not meta:
                return 0
            children = [codec.decode_key(m) for m in kids]
            lists: list[list[bytes]] = [[bytes(m) for m in items]]
            child_keys = [self.schema.child(c) for c in children]
            if children:
                got = yield Commands(
                    [("LRANGE", ck.msgs, 0, -1) for ck in child_keys], transaction=True
                )
                lists += [[bytes(m) for m in page] for page in got]
            args: list[bytes | str | int] = [target, len(children), *children]
            for n, elements in enumerate(lists):
                pairs = yield from self._reseal_elements(key, elements, target, 8 if n else 0)
                args += (len(pairs) // 2, *pairs)
            quads = yield from self._reseal_metadata(key, meta, target)
            args += (len(quads) // 4, *quads)
            keys: list[str | bytes] = [sk.meta, sk.msgs, sk.kids]
            for ck in child_keys:
                keys += (ck.meta, ck.msgs)
            reply = yield ScriptCall("reseal_session", keys, args)
            if reply[0] == Status.NOT_FOUND:
                return 0
            if reply[0] != Status.CONFLICT:
                return int(check(reply, Ctx(key, keys))[1])
        raise ConcurrentChange(key, "its children kept changing while it was re-sealed")

    def _reseal_elements(
        self, owner: str, elements: list[bytes], target: bytes, skip: int
    ) -> Op[list[bytes]]:
        """Old/new pairs for the elements of one list not sealed under ``target`` yet (a child's
        elements start with ``skip`` = 8 digest bytes).
        """
        out: list[bytes] = []
        for i, item in enumerate(elements):
            head, element = item[:skip], item[skip:]
            parts = crypto.split_element(element)
            if parts is None:
                msg_id = _cleartext_id(owner, element)
                body = element
            elif crypto.kid_of(parts[1]) == target:
                continue
            else:
                msg_id = parts[0]
                body = yield from self._opened(
                    functools.partial(_open_element, owner=owner, item=element, i=i)
                )
            assert self.keyring is not None
            out += (item, head + crypto.seal_message(self.keyring, target, owner, msg_id, body))
        return out

    def _reseal_metadata(
        self, owner: str, meta: dict[bytes, bytes], target: bytes
    ) -> Op[list[bytes]]:
        out: list[bytes] = []
        for raw_field, raw_value in meta.items():
            field, value = bytes(raw_field), bytes(raw_value)
            if field.startswith(b"m:"):
                plain = value
            elif field.startswith(b"e:") and crypto.kid_of(value) != target:
                name = field[2:].decode("utf-8", "replace")
                plain = yield from self._opened(
                    functools.partial(_open_value, owner=owner, name=name, value=value)
                )
            else:
                continue
            name = field[2:].decode("utf-8", "replace")
            assert self.keyring is not None
            sealer = Sealer(self.keyring, target, owner)
            out += (field, value, b"e:" + field[2:], sealer.meta(name, plain))
        return out


def _ring(keyring: Keyring | None) -> Keyring:
    if keyring is None:  # pragma: no cover (only called with a passphrase)
        raise PassphraseRequired("")
    return keyring


def _open_element(keyring: Keyring | None, *, owner: str, item: bytes, i: int) -> bytes:
    return crypto.open_message(_ring(keyring), owner, item, owner, i)


def _open_value(keyring: Keyring | None, *, owner: str, name: str, value: bytes) -> bytes:
    return crypto.open_meta(_ring(keyring), owner, name, value)


def _cleartext_id(key: str, element: bytes) -> str:
    end = element.find(b'",', 7)
    if element[:7] != b'{"id":"' or end < 0:
        raise CorruptData(key, "a stored message does not start with its id")
    return element[7:end].decode("ascii", "replace")
