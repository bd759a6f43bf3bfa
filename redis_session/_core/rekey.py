"""Passphrase rotation (``rekey``), online and resumable.

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

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import codec, contracts, crypto
from ..crypto import CURRENT, NEXT, MasterKey, Passphrase, Sealer, SessionKey
from ..errors import ConcurrentChange, CorruptData, InvalidArgument, TamperDetected, WrongPassphrase
from ..keys import KeySchema
from ..status import Ctx, Status, check
from .index import Index
from .keyring import Keyring, master_field
from .limits import Limits
from .requests import Commands, Op

REKEY_PASSES = 8
RESEAL_ATTEMPTS = 8
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


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Rotation:
    """Rotates an encrypted store's passphrase (see the module docstring)."""

    def __init__(self, keyring: Keyring, index: Index, schema: KeySchema, limits: Limits) -> None:
        self.keyring = keyring
        self.index = index
        self.schema = schema
        self.limits = limits

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
        if self.keyring.passphrase is None:
            raise InvalidArgument("passphrase", "rekey needs a store opened with a passphrase")
        yield from self.keyring.unlock()
        assert self.keyring.master is not None
        salts, checks, ring = yield from self.keyring.records()
        prefix = self.schema.prefix
        resumed = salts[1] is not None
        if resumed:
            next_salt = bytes(salts[1])
            check_next = bytes(checks[1])
            work_next = self.keyring.work_allowed(crypto.work_of(check_next))
            kek_next = yield from self.keyring.kek(new, next_salt, work_next)
            if not crypto.matches(kek_next, check_next):
                raise WrongPassphrase(
                    "a rotation to another passphrase is under way: finish it with that one"
                )
            wrapped = ring.get(master_field(NEXT).encode(), b"")
            master_next = crypto.unwrap_master_key(kek_next, next_salt, work_next, wrapped, prefix)
            if master_next is None:
                raise CorruptData("keyring", "the rotation's master key does not open")
        else:
            next_salt, work_next = os.urandom(16), self.keyring.kdf_work
            kek_next = yield from self.keyring.kek(new, next_salt, work_next)
            master_next = crypto.rewrap_master_key(
                self.keyring.master.raw, kek_next, next_salt, work_next, prefix
            )
            call = contracts.begin_rekey(
                salts=self.schema.salts,
                checksums=self.schema.checksums,
                keyring=self.schema.keyring,
                record=NEXT,
                salt=next_salt,
                key_check=crypto.key_check(kek_next, work_next),
                master_field=master_field(NEXT),
                master_wrap=master_next.wrapped,
            )
            reply = yield call
            if contracts.status(reply) == Status.CONFLICT:
                raise ConcurrentChange("keyring", "another rotation began first")
            check(reply, Ctx(name="keyring", keys=call.keys))
        self.keyring.remember_master(master_next)
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
                    if record is not None and record.master_wrap == master_next.wrapped:
                        key_now = self.keyring.session_key(key, bytes(kid), bytes(dk))
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
        call = contracts.finish_rekey(
            salts=self.schema.salts,
            checksums=self.schema.checksums,
            keyring=self.schema.keyring,
            record=CURRENT,
            next_record=NEXT,
            next_salt=next_salt,
        )
        reply = yield call
        if contracts.status(reply) == Status.CONFLICT:
            raise ConcurrentChange("keyring", "the rotation was finished or undone meanwhile")
        check(reply, Ctx(name="keyring", keys=call.keys))
        self.keyring.passphrase = new
        self.keyring.master, self.keyring.masters = None, []
        self.keyring.session_keys.clear()
        yield from self.keyring.unlock()
        return RekeyReport(sessions, values, number, resumed)

    def _all_sessions(self) -> Op[list[str]]:
        indexes = yield from self.index.indexes()
        if not indexes:
            return []
        pages = yield Commands([("ZRANGE", i, 0, -1) for i in indexes])
        return [codec.decode_key(m) for page in pages for m in page]

    def _move_session(self, key: str, master: MasterKey) -> Op[int]:
        """Give session ``key`` a key record under ``master``'s wrap: a sealed session keeps
        its data key; one in cleartext gets one of its own, then its values sealed in steps.
        Returns how many values were re-sealed.
        """
        sk = self.schema.session(key)
        prefix = self.schema.prefix
        for _ in range(RESEAL_ATTEMPTS):
            ((version, kid, dk),) = yield Commands([("HMGET", sk.meta, "v", "k", "dk")])
            if version is None:
                return 0
            kid, dk = bytes(kid or b""), bytes(dk or b"")
            if kid or dk:
                current = self.keyring.session_key(key, kid, dk)
                new_kid, dek, pending = kid, current.raw, current.pending
                from_cleartext = current.from_cleartext
            else:
                new_kid, dek = crypto.new_session_key()
                pending, from_cleartext = True, True
            new_dk = crypto.make_dk(master, prefix, key, new_kid, dek, pending, from_cleartext)
            reply = yield contracts.rekey_session(
                meta=sk.meta, kid=kid, dk=dk, new_kid=new_kid, new_dk=new_dk
            )
            if contracts.status(reply) == Status.NOT_FOUND:
                return 0
            if contracts.status(reply) == Status.CONFLICT:
                continue
            check(reply, Ctx(key, [sk.meta]))
            self.keyring.session_keys.pop(key, None)
            if not pending:
                return 0
            target = self.keyring.session_key(key, new_kid, new_dk)
            resealed = yield from self._reseal(key, target)
            done_dk = crypto.make_dk(master, prefix, key, new_kid, dek, False)
            reply = yield contracts.rekey_session(
                meta=sk.meta, kid=new_kid, dk=new_dk, new_kid=new_kid, new_dk=done_dk
            )
            if contracts.status(reply) == Status.CONFLICT:
                continue
            check(reply, Ctx(key, [sk.meta]))
            self.keyring.session_keys.pop(key, None)
            return resealed
        raise ConcurrentChange(key, "its key kept changing while it was moved to a new one")

    def _reseal(self, key: str, target: SessionKey) -> Op[int]:
        """Re-seal everything session ``key`` (and its children) hold under ``target``, in
        steps; values sealed so already (written since the move began) are left alone.
        """
        sk = self.schema.session(key)
        sealer = self.keyring.sealer_of(key, target)
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
            call = contracts.reseal_session(
                session_meta=sk.meta,
                owner_meta=sk.meta,
                list=sk.msgs,
                kid=target.kid,
                generation="",
                elements=(),
                fields=quads,
            )
            reply = yield call
            if contracts.status(reply) not in (Status.NOT_FOUND, Status.CONFLICT):
                check(reply, Ctx(key, call.keys))
                replaced += contracts.parsed(contracts.Resealed, reply).replaced
        return replaced

    def _reseal_list(
        self, key: str, owner_meta: str, list_key: str, skip: int, sealer: Sealer
    ) -> Op[int]:
        """Re-seal one list of session ``key`` in steps (a child's elements start with
        ``skip`` = 8 digest bytes); a list that began a new generation meanwhile is read again.
        """
        replaced = 0
        for _ in range(RESEAL_ATTEMPTS):
            ((g_now, h_now, n_now),) = yield Commands([("HMGET", owner_meta, "g", "h", "n")])
            g = int(g_now or 0)
            h, n = int(h_now or 0), int(n_now or 0)
            at, stale = h, False
            while at < n and not stale:
                reply = yield contracts.read_range(
                    meta=owner_meta,
                    msgs=list_key,
                    generation=g,
                    from_=at,
                    to=n,
                    budget=self.limits.read_budget,
                )
                if contracts.status(reply) == Status.STALE:
                    stale = True
                    break
                part = contracts.parsed(contracts.Part, check(reply, Ctx(key)))
                items = part.elements
                triples: list[Any] = []
                for offset, item in enumerate(items):
                    new = self._reseal_element(key, item, skip, sealer, at + offset)
                    if new is not None:
                        triples += (at + offset, item, new)
                for i in range(0, len(triples), 3 * RESEAL_STEP):
                    run = triples[i : i + 3 * RESEAL_STEP]
                    reply = yield contracts.reseal_session(
                        session_meta=self.schema.session(key).meta,
                        owner_meta=owner_meta,
                        list=list_key,
                        kid=sealer.kid,
                        generation=g,
                        elements=run,
                        fields=(),
                    )
                    if contracts.status(reply) in (Status.CONFLICT, Status.NOT_FOUND):
                        stale = True
                        break
                    resealed = contracts.parsed(contracts.Resealed, check(reply, Ctx(key)))
                    replaced += resealed.replaced
                    g = resealed.generation
                at = part.upto
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
        if self.keyring.master is None:
            yield from self.keyring.unlock()
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
