"""Encryption at rest: key derivation, the keyring's records, sealing and opening values.

Pure functions and small classes, no I/O (the keyring is read and written by ``_core.keyring``).

Keys (envelope encryption). A passphrase and a random 16-byte salt give a key-encryption key
(KEK) by scrypt (``n = 2**work``, ``r = 8``, ``p = 1``; ``work`` = 15 by default: 32 MiB and
~0.1 s, paid once per store). The KEK wraps the prefix's master key (MK); the MK wraps every
session's own random data key (DEK), named by a 4-byte key id (meta field ``k``). All
AES-256-GCM with a 12-byte random nonce and a 16-byte tag::

    key check         rs1:scrypt:<work>:8:1:<hex HMAC-SHA256(KEK, "redis_session key check")>
    master key (MK)   keyring field mk: nonce (12) | AES-GCM(KEK, MK), aad lp("rs2 mk", prefix)
    session data key  meta field dk: 0x02 | salt (16) | work (1) | the MK's wrap (as above)
                      | nonce (12) | AES-GCM(MK, DEK (32) | flag (1)),
                      aad = lp("rs2 dek", prefix, session, key id)
    sealed message    {"id":"<id>", | 0x02 | nonce (12) | AES-GCM(DEK, JSON), aad lp("rs2 msg",
                      prefix, session, id)           (the id stays readable for scripts)
    metadata value    0x03 | version (8, big-endian) | nonce (12) | AES-GCM(DEK, value),
                      aad lp("rs2 meta", prefix, session, name, version)
    scalar value      0x02 | nonce (12) | AES-GCM(DEK, value), aad lp("rs2 scalar", prefix,
                      session, field)

``lp`` encodes each part as a 4-byte big-endian length and its bytes: no two different lists
of parts encode the same, so a ciphertext copied to another prefix, session, message or field
fails authentication (a child's messages use its parent's key: they move between the two at
fork and merge). Each session also carries the master key wrapped under the passphrase's key,
with the salt and work factor beside it, so a session opens with the passphrase alone. The
prefix's records (salt, key check, the master key's wrap) are a check and a cache: losing them
(eviction) neither splits workers between keys (a new worker restores them from a sealed
session) nor makes a session unreadable. A passphrase rotation rewraps the master key (and each
session's copy of its wrap); workers that hold the master key keep working meanwhile. The data
key's wrap binds it to its session and key id: a dk moved to another session, or another ``k``,
fails. Its flag byte says whether the session may still hold cleartext values (a ``rekey`` is
moving a cleartext session to sealed).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from .errors import CorruptData, DecryptionFailed, InvalidArgument, TamperDetected

KID_LEN = 4
NONCE_LEN = 12
DEFAULT_WORK = 15
MIN_WORK = 10
_CHECK_INFO = b"redis_session key check"
_CHECK_TAG = b"rs1:scrypt:"

# Names in the salts/checksums hashes (the same records get_salt/get_checksum read).
CURRENT = "passphrase"
NEXT = "passphrase.next"


class Passphrase:
    """A passphrase that never shows itself: not in ``repr``, ``str`` or tracebacks' locals."""

    __slots__ = ("_secret",)

    def __init__(self, secret: str | bytes) -> None:
        if isinstance(secret, str):
            try:
                secret = secret.encode()
            except UnicodeEncodeError:
                raise InvalidArgument("passphrase", "must be encodable as UTF-8") from None
        if not isinstance(secret, bytes) or not secret:
            raise InvalidArgument("passphrase", "must be a non-empty str or bytes")
        self._secret = secret

    def reveal(self) -> bytes:
        """The passphrase's bytes (for the KDF only)."""
        return self._secret

    def __repr__(self) -> str:
        return "Passphrase('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Passphrase) and hmac.compare_digest(self._secret, other._secret)

    def __hash__(self) -> int:
        return hash(type(self))


def check_work(work: object) -> int:
    """A valid scrypt work factor (log2 of n)."""
    if not isinstance(work, int) or isinstance(work, bool) or not MIN_WORK <= work <= 22:
        raise InvalidArgument("kdf_work", f"must be an int from {MIN_WORK} to 22, got {work!r}")
    return work


def derive_kek(passphrase: Passphrase, salt: bytes, work: int) -> bytes:
    """The key-encryption key for ``passphrase`` and ``salt`` (scrypt, memory-hard)."""
    return Scrypt(salt=salt, length=32, n=2**work, r=8, p=1).derive(passphrase.reveal())


def key_check(kek: bytes, work: int) -> bytes:
    """The key-check record stored as a checksum: it tells a right passphrase from a wrong one
    without revealing the KEK.
    """
    mac = hmac.new(kek, _CHECK_INFO, hashlib.sha256).hexdigest()
    return _CHECK_TAG + f"{work}:8:1:{mac}".encode()


def work_of(check: bytes) -> int:
    """The scrypt work factor a key-check record was made with."""
    try:
        if not check.startswith(_CHECK_TAG):
            raise ValueError
        return check_work(int(check[len(_CHECK_TAG) :].split(b":", 1)[0]))
    except (ValueError, InvalidArgument):
        raise CorruptData(
            "keyring", "the key-check record is not one redis_session wrote"
        ) from None


def matches(kek: bytes, check: bytes) -> bool:
    """Whether ``kek`` is the key the key-check record was made from (constant time)."""
    return hmac.compare_digest(key_check(kek, work_of(check)), check)


V2 = 0x02
V2_META = 0x03
VERSION_LEN = 8
MK_WRAP_LEN = NONCE_LEN + 32 + 16
DEK_WRAP_LEN = NONCE_LEN + 32 + 1 + 16
DK_LEN = 1 + 16 + 1 + MK_WRAP_LEN + DEK_WRAP_LEN
FLAG_PENDING = 0x01
"""The data key's flag: cleartext values may remain (a ``rekey`` is sealing the session)."""
FLAG_FROM_CLEARTEXT = 0x02
"""The data key's flag: the session being sealed was in cleartext, so its cleartext values are
its own and get sealed (the moves ``rekey`` makes all set it)."""


def lp(*parts: bytes | str) -> bytes:
    """``parts`` length-prefixed (4-byte big-endian length, then the bytes): unambiguous."""
    out = bytearray()
    for part in parts:
        raw = part.encode() if isinstance(part, str) else part
        out += len(raw).to_bytes(4, "big") + raw
    return bytes(out)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A session's own data key, its key id and flag, once unwrapped."""

    kid: bytes
    aead: AESGCM
    raw: bytes = field(repr=False)
    pending: bool = False
    from_cleartext: bool = False


@dataclass(frozen=True, slots=True)
class MasterKey:
    """The prefix's master key: it wraps every session's data key; the passphrase's
    key wraps it. ``wrapped`` is that wrap, with the ``salt`` and ``work`` it was made with.
    """

    raw: bytes = field(repr=False)
    salt: bytes
    work: int
    wrapped: bytes

    def __repr__(self) -> str:
        return f"MasterKey(salt={self.salt.hex()[:8]}…)"


def new_master_key(kek: bytes, salt: bytes, work: int, prefix: str) -> MasterKey:
    """A fresh master key for ``prefix``, wrapped under ``kek``."""
    return rewrap_master_key(os.urandom(32), kek, salt, work, prefix)


def rewrap_master_key(raw: bytes, kek: bytes, salt: bytes, work: int, prefix: str) -> MasterKey:
    """Master key ``raw`` wrapped under ``kek`` (made from ``salt`` and ``work``)."""
    nonce = os.urandom(NONCE_LEN)
    wrapped = nonce + AESGCM(kek).encrypt(nonce, raw, lp(b"rs2 mk", prefix))
    return MasterKey(raw, salt, work, wrapped)


def unwrap_master_key(
    kek: bytes, salt: bytes, work: int, wrapped: bytes, prefix: str
) -> MasterKey | None:
    """The master key ``wrapped`` holds, or None when ``kek`` does not open it."""
    try:
        raw = AESGCM(kek).decrypt(wrapped[:NONCE_LEN], wrapped[NONCE_LEN:], lp(b"rs2 mk", prefix))
    except (InvalidTag, ValueError):
        return None
    return MasterKey(raw, salt, work, wrapped)


def session_key(
    kid: bytes, dek: bytes, pending: bool = False, from_cleartext: bool = False
) -> SessionKey:
    """The :class:`SessionKey` of data key ``dek`` under key id ``kid``."""
    return SessionKey(kid, AESGCM(dek), dek, pending, from_cleartext)


def new_session_key() -> tuple[bytes, bytes]:
    """A fresh key id (4 bytes) and data key (32 bytes) for a new sealed session."""
    return os.urandom(KID_LEN), os.urandom(32)


def make_dk(
    mk: MasterKey,
    prefix: str,
    owner: str,
    kid: bytes,
    dek: bytes,
    pending: bool = False,
    from_cleartext: bool = False,
) -> bytes:
    """A session's meta field dk: the master key's wrap (with its salt and work: the session
    opens with the passphrase alone) and the session's data key wrapped under the master key,
    bound to the session and its key id.
    """
    nonce = os.urandom(NONCE_LEN)
    flags = (FLAG_PENDING if pending else 0) | (FLAG_FROM_CLEARTEXT if from_cleartext else 0)
    plain = dek + bytes((flags,))
    dek_wrap = nonce + AESGCM(mk.raw).encrypt(nonce, plain, lp(b"rs2 dek", prefix, owner, kid))
    return bytes((V2,)) + mk.salt + bytes((mk.work,)) + mk.wrapped + dek_wrap


class KeyRecord(NamedTuple):
    """A session's dk field, parsed."""

    salt: bytes
    work: int
    master_wrap: bytes
    """The master key wrapped under the passphrase's key (made from ``salt`` and ``work``)."""
    key_wrap: bytes
    """The session's data key wrapped under the master key."""


def parse_dk(dk: bytes) -> KeyRecord | None:
    """The parts of a dk field; None if it is none."""
    if len(dk) != DK_LEN or dk[0] != V2:
        return None
    at = 1 + 16 + 1
    return KeyRecord(dk[1:17], dk[17], dk[at : at + MK_WRAP_LEN], dk[at + MK_WRAP_LEN :])


def open_session_key(
    mk: MasterKey, dek_wrap: bytes, prefix: str, owner: str, kid: bytes
) -> SessionKey | None:
    """The session key a dk holds, or None when it does not open (another master key, or a
    record of another session or key id).
    """
    try:
        plain = AESGCM(mk.raw).decrypt(
            dek_wrap[:NONCE_LEN], dek_wrap[NONCE_LEN:], lp(b"rs2 dek", prefix, owner, kid)
        )
    except (InvalidTag, ValueError):
        return None
    flags = plain[32]
    return session_key(
        kid, plain[:32], bool(flags & FLAG_PENDING), bool(flags & FLAG_FROM_CLEARTEXT)
    )


def is_sealed_scalar(value: bytes) -> bool:
    """Whether a stored scalar field's value is sealed."""
    return bool(value) and value[0] == V2


def split_element(item: bytes) -> tuple[str, bytes] | None:
    """``(id, sealed value)`` of a sealed message element; None for a cleartext one."""
    if item[:7] != b'{"id":"':
        return None
    end = item.find(b'",', 7)
    if end < 0 or item[end + 2 : end + 3] != b"\x02":
        return None
    try:
        return item[7:end].decode("ascii"), item[end + 2 :]
    except UnicodeDecodeError:
        return None


_ID_HEAD = b'{"id":"'


@dataclass(slots=True)
class Opener:
    """Opens what one session (``owner``) holds, and refuses what a sealed session may not
    hold. ``session_key``: the session's data key (None for a cleartext session: it may hold
    no sealed value). ``seen``: called with each metadata name and version opened (the store
    checks them against the newest it saw).
    """

    owner: str
    prefix: str
    session_key: SessionKey | None
    seen: Callable[[str, int], None] | None = None
    _msg_bound: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._msg_bound = lp(b"rs2 msg", self.prefix, self.owner)

    @property
    def sealed(self) -> bool:
        """Whether the session is sealed (it has a data key)."""
        return self.session_key is not None

    @property
    def _own_cleartext(self) -> bool:
        """Whether cleartext may be the session's own: it is moving from cleartext to sealed."""
        key = self.session_key
        return key is None or (key.pending and key.from_cleartext)

    def message(self, item: bytes, key: str, i: int) -> bytes:
        """A message element's JSON: opened, or refused (see :class:`TamperDetected`)."""
        # The hot path (a sealed element of a sealed session), written out: the bound data is
        # the session's part, computed once, and the id's part (see lp).
        end = item.find(b'",', 7)
        session_key = self.session_key
        if (
            end > 0 and len(item) > end + 2 and item[end + 2] == V2
            and session_key is not None and item[:7] == _ID_HEAD
        ):  # fmt: skip
            raw_id = item[7:end]
            bound = self._msg_bound + len(raw_id).to_bytes(4, "big") + raw_id
            try:
                return session_key.aead.decrypt(item[end + 3 : end + 15], item[end + 15 :], bound)
            except (InvalidTag, ValueError):
                raise DecryptionFailed(key, f"message {i} failed authentication") from None
        if split_element(item) is None:
            if not self._own_cleartext:
                raise TamperDetected(key, f"message {i} is in cleartext in a sealed session")
            return item
        raise TamperDetected(key, f"message {i} is sealed in a session without a data key")

    def meta(self, name: str, value: bytes, key: str) -> bytes:
        """A metadata value's plaintext (``e:`` fields)."""
        if self.session_key is None:
            raise TamperDetected(key, f"metadata {name!r} is sealed in a cleartext session")
        if value[:1] != bytes((V2_META,)):
            raise TamperDetected(key, f"metadata {name!r} is not sealed as this store seals")
        version = value[1 : 1 + VERSION_LEN]
        bound = lp(b"rs2 meta", self.prefix, self.owner, name, version)
        plain = _open(self.session_key, value[1 + VERSION_LEN :], bound, key, f"metadata {name!r}")
        if self.seen is not None:
            self.seen(name, int.from_bytes(version, "big"))
        return plain

    def cleartext_meta(self, name: str, key: str) -> None:
        """Refuse a cleartext (``m:``) metadata entry in a sealed session."""
        if not self._own_cleartext:
            raise TamperDetected(key, f"metadata {name!r} is in cleartext in a sealed session")

    def scalar(self, name: str, value: bytes, key: str) -> bytes:
        """A scalar field's plaintext (sealed in a sealed session)."""
        if not value:
            return value
        if self.session_key is None:
            if value[0] == V2 and len(value) >= 1 + NONCE_LEN + 16:
                raise TamperDetected(key, f"field {name!r} is sealed, but not by this session")
            return value
        if not is_sealed_scalar(value):
            if not self._own_cleartext:
                raise TamperDetected(key, f"field {name!r} is in cleartext in a sealed session")
            return value
        bound = lp(b"rs2 scalar", self.prefix, self.owner, name)
        return _open(self.session_key, value[1:], bound, key, f"field {name!r}")


def _open(session_key: SessionKey, value: bytes, bound: bytes, key: str, what: str) -> bytes:
    if len(value) < NONCE_LEN + 16:
        raise DecryptionFailed(key, f"{what} is not a sealed value")
    try:
        return session_key.aead.decrypt(value[:NONCE_LEN], value[NONCE_LEN:], bound)
    except InvalidTag:
        raise DecryptionFailed(key, f"{what} failed authentication") from None


class Sealer:
    """Seals what one write stores in session ``owner`` under its data key ``session_key``
    (key id ``kid``). Without the key (the store does not know the session's key yet) it
    seals nothing: it sends placeholders, and the script answers with the session's key
    record before writing anything.
    """

    __slots__ = ("kid", "owner", "prefix", "session_key", "versions")

    def __init__(
        self,
        kid: bytes,
        owner: str,
        *,
        prefix: str = "",
        session_key: SessionKey | None = None,
        versions: Callable[[str], int] | None = None,
    ) -> None:
        self.kid = kid
        self.owner = owner
        self.prefix = prefix
        self.session_key = session_key
        self.versions = versions

    def message(self, msg_id: str, body: bytes) -> bytes:
        """A message's stored element: its readable id prefix, then its whole JSON sealed."""
        head = b'{"id":"' + msg_id.encode() + b'",' + bytes((V2,))
        if self.session_key is None:
            return head
        nonce = os.urandom(NONCE_LEN)
        bound = lp(b"rs2 msg", self.prefix, self.owner, msg_id)
        return head + nonce + self.session_key.aead.encrypt(nonce, body, bound)

    def meta(self, name: str, value: bytes) -> bytes:
        """A metadata value, with a version newer than any this store saw."""
        if self.session_key is None:
            return bytes((V2_META,))
        version = (self.versions(name) if self.versions else 0).to_bytes(VERSION_LEN, "big")
        nonce = os.urandom(NONCE_LEN)
        bound = lp(b"rs2 meta", self.prefix, self.owner, name, version)
        return (
            bytes((V2_META,)) + version + nonce + self.session_key.aead.encrypt(nonce, value, bound)
        )

    def scalar(self, name: str, value: bytes) -> bytes:
        """A scalar field's value."""
        if not value:
            return value
        if self.session_key is None:
            return bytes((V2,))
        nonce = os.urandom(NONCE_LEN)
        bound = lp(b"rs2 scalar", self.prefix, self.owner, name)
        return bytes((V2,)) + nonce + self.session_key.aead.encrypt(nonce, value, bound)
