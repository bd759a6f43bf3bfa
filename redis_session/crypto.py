"""Encryption at rest: key derivation, the keyring's records, sealing and opening values.

This layout (format 2) and the previous one (format 1) are both read; what this layout writes
is format 2. See "Format 2" below; the rest of this docstring describes format 1, whose
sessions keep opening (and being written in it) until ``rekey`` moves them to format 2.

Pure functions and small classes, no I/O (the keyring is read and written by ``_keyring``).

Keys. A passphrase and a random 16-byte salt give a key-encryption key (KEK) by scrypt
(``n = 2**work``, ``r = 8``, ``p = 1``; ``work`` = 15 by default: 32 MiB and ~0.1 s, paid once per
store). The KEK never touches data: it wraps random 256-bit data keys (DEKs), each named by a
4-byte key id. Every ciphertext carries the key id of the DEK that sealed it, so a rotation can
re-encrypt online while readers accept every key of the keyring.

Formats (all AES-256-GCM, 12-byte random nonce, 16-byte tag)::

    sealed value      0x01 | key id (4) | nonce (12) | ciphertext+tag
    sealed message    {"id":"<id>", | sealed value        (the id stays readable for scripts)
    key check         rs1:scrypt:<work>:8:1:<hex HMAC-SHA256(KEK, "redis_session key check")>
    wrapped DEK       nonce (12) | AES-GCM(KEK, DEK, aad = "redis_session dek " + key id)

Associated data binds each ciphertext to its place: ``redis_session/1``, the purpose
(``msg`` or ``meta``), the session key (a child's messages use its parent's key, since they move
between the two at fork and merge) and the message id or metadata name. A ciphertext copied to
another session, another message or another field fails authentication. (Format 1 joins the
parts with NUL, which keys and names may hold: ambiguous. Format 2 fixes that.)

Format 2 (per-session data keys, envelope encryption)::

    master key (MK)   keyring field mk: nonce (12) | AES-GCM(KEK, MK), aad lp("rs2 mk", prefix)
    session data key  meta field dk: 0x02 | salt (16) | work (1) | the MK's wrap (as above)
                      | nonce (12) | AES-GCM(MK, DEK (32) | flag (1)),
                      aad = lp("rs2 dek", prefix, session, key id)
    sealed message    {"id":"<id>", | 0x02 | nonce (12) | AES-GCM(DEK, JSON), aad lp("rs2 msg",
                      prefix, session, id)
    metadata value    0x03 | version (8, big-endian) | nonce (12) | AES-GCM(DEK, value),
                      aad lp("rs2 meta", prefix, session, name, version)
    scalar value      0x02 | nonce (12) | AES-GCM(DEK, value), aad lp("rs2 scalar", prefix,
                      session, field)

``lp`` encodes each part as a 4-byte big-endian length and its bytes: no two different lists
of parts encode the same. Every sealed session has its own random data key, wrapped under the
prefix's master key; each session also carries the master key wrapped under the passphrase's
key, with the salt and work factor beside it, so a session opens with the passphrase alone.
The prefix's records (salt, key check, the master key's wrap) are a check and a cache: losing
them (eviction) neither splits workers between keys (a new worker restores them from a sealed
session) nor makes a session unreadable. A passphrase rotation rewraps the master key (and
each session's copy of its wrap); workers that hold the master key keep working meanwhile.
The data key's wrap binds it to its session and key id (meta field ``k``): a dk moved to
another session, or another ``k``, fails. Its flag byte says whether the session may still
hold values of format 1 or cleartext (a ``rekey`` moving it to format 2 is under way).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from .errors import (
    CorruptData,
    DecryptionFailed,
    InvalidArgument,
    KeyUnavailable,
    TamperDetected,
)

MAGIC = 0x01
KID_LEN = 4
NONCE_LEN = 12
HEADER_LEN = 1 + KID_LEN + NONCE_LEN
DEFAULT_WORK = 15
MIN_WORK = 10
_CHECK_INFO = b"redis_session key check"
_CHECK_TAG = b"rs1:scrypt:"
_AAD_HEAD = b"redis_session/1\x00"

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


def wrap(kek: bytes, kid: bytes, dek: bytes) -> bytes:
    """``dek`` sealed under ``kek`` for the keyring."""
    nonce = os.urandom(NONCE_LEN)
    return nonce + AESGCM(kek).encrypt(nonce, dek, b"redis_session dek " + kid)


def unwrap(kek: bytes, kid: bytes, wrapped: bytes) -> bytes:
    """The DEK ``wrap`` sealed; ``CorruptData`` when the record was altered."""
    try:
        return AESGCM(kek).decrypt(
            wrapped[:NONCE_LEN], wrapped[NONCE_LEN:], b"redis_session dek " + kid
        )
    except (InvalidTag, ValueError):
        raise CorruptData("keyring", f"data key {kid.hex()} does not open") from None


V2 = 0x02
V2_META = 0x03
VERSION_LEN = 8
MK_WRAP_LEN = NONCE_LEN + 32 + 16
DEK_WRAP_LEN = NONCE_LEN + 32 + 1 + 16
DK_LEN = 1 + 16 + 1 + MK_WRAP_LEN + DEK_WRAP_LEN
FLAG_PENDING = 0x01
"""The data key's flag: values of format 1 or cleartext may remain (a move to format 2)."""
FLAG_FROM_CLEARTEXT = 0x02
"""The data key's flag: the session moving to format 2 was in cleartext (not format 1), so
its cleartext values are its own and get sealed; in a format-1 session they are forgeries."""


def lp(*parts: bytes | str) -> bytes:
    """``parts`` length-prefixed (4-byte big-endian length, then the bytes): unambiguous."""
    out = bytearray()
    for part in parts:
        raw = part.encode() if isinstance(part, str) else part
        out += len(raw).to_bytes(4, "big") + raw
    return bytes(out)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A session's own data key (format 2), its key id and flag, once unwrapped."""

    kid: bytes
    aead: AESGCM
    raw: bytes = field(repr=False)
    pending: bool = False
    from_cleartext: bool = False


@dataclass(frozen=True, slots=True)
class MasterKey:
    """The prefix's master key (format 2): it wraps every session's data key; the passphrase's
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


def parse_dk(dk: bytes) -> tuple[bytes, int, bytes, bytes] | None:
    """``(salt, work, master key wrap, data key wrap)`` of a dk field; None if it is none."""
    if len(dk) != DK_LEN or dk[0] != V2:
        return None
    at = 1 + 16 + 1
    return dk[1:17], dk[17], dk[at : at + MK_WRAP_LEN], dk[at + MK_WRAP_LEN :]


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


def aad(purpose: bytes, owner: str, name: str) -> bytes:
    """Associated data: what a ciphertext is bound to."""
    return b"\x00".join((_AAD_HEAD + purpose, owner.encode(), name.encode()))


@dataclass(slots=True)
class Keyring:
    """The data keys a store holds, by key id, and the id new sessions are sealed with."""

    current: bytes
    keys: dict[bytes, AESGCM] = field(default_factory=dict)
    raw: dict[bytes, bytes] = field(default_factory=dict, repr=False)

    def add(self, kid: bytes, dek: bytes) -> None:
        """Hold ``dek`` under ``kid``."""
        self.keys[kid] = AESGCM(dek)
        self.raw[kid] = dek

    def __repr__(self) -> str:
        return f"Keyring(current={self.current.hex()}, kids={[k.hex() for k in self.keys]})"


def seal(keyring: Keyring, kid: bytes, data: bytes, bound: bytes) -> bytes:
    """``data`` sealed under key ``kid`` with associated data ``bound``."""
    nonce = os.urandom(NONCE_LEN)
    return bytes((MAGIC,)) + kid + nonce + keyring.keys[kid].encrypt(nonce, data, bound)


def is_sealed(value: bytes) -> bool:
    """Whether a stored value is a sealed one."""
    return value[:1] == b"\x01"


def is_sealed_scalar(value: bytes) -> bool:
    """Whether a stored scalar field's value is sealed (format 2)."""
    return bool(value) and value[0] == V2


def kid_of(value: bytes) -> bytes:
    """The key id a sealed value names."""
    return value[1 : 1 + KID_LEN]


def unseal(keyring: Keyring, value: bytes, bound: bytes, key: str, what: str) -> bytes:
    """The plaintext of a sealed value; ``KeyUnavailable`` for a key id the keyring lacks,
    ``DecryptionFailed`` when authentication fails (tampered, moved, or foreign).
    """
    if len(value) < HEADER_LEN + 16 or value[0] != MAGIC:
        raise DecryptionFailed(key, f"{what} is not a sealed value")
    kid = value[1 : 1 + KID_LEN]
    aead = keyring.keys.get(kid)
    if aead is None:
        raise KeyUnavailable(kid.hex())
    try:
        return aead.decrypt(value[1 + KID_LEN : HEADER_LEN], value[HEADER_LEN:], bound)
    except InvalidTag:
        raise DecryptionFailed(key, f"{what} failed authentication") from None


def seal_message(keyring: Keyring, kid: bytes, owner: str, msg_id: str, body: bytes) -> bytes:
    """A message's stored element: its readable id prefix, then its whole JSON sealed."""
    prefix = b'{"id":"' + msg_id.encode() + b'",'
    return prefix + seal(keyring, kid, body, aad(b"msg", owner, msg_id))


def split_element(item: bytes) -> tuple[str, bytes] | None:
    """``(id, sealed value)`` of a sealed message element (format 1 or 2); None for a
    cleartext one.
    """
    if item[:7] != b'{"id":"':
        return None
    end = item.find(b'",', 7)
    if end < 0 or item[end + 2 : end + 3] not in (b"\x01", b"\x02"):
        return None
    try:
        return item[7:end].decode("ascii"), item[end + 2 :]
    except UnicodeDecodeError:
        return None


_ID_HEAD = b'{"id":"'


@dataclass(slots=True)
class Opener:
    """Opens what one session (``owner``) holds, and refuses what a sealed session may not
    hold. ``sealed``: the session has a key id; ``session_key``: its format-2 key (None for a
    format-1 session); ``keyring``: the format-1 keys. ``seen``: called with each metadata
    name and version opened (the store checks them against the newest it saw).
    """

    owner: str
    prefix: str
    keyring: Keyring | None
    session_key: SessionKey | None
    sealed: bool
    seen: Callable[[str, int], None] | None = None
    _msg_bound: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._msg_bound = lp(b"rs2 msg", self.prefix, self.owner)

    @property
    def _own_cleartext(self) -> bool:
        """Whether cleartext may be the session's own: it is moving from cleartext to sealed."""
        key = self.session_key
        return key is not None and key.pending and key.from_cleartext

    @property
    def strict(self) -> bool:
        """Whether only this layout's sealed values are accepted (no move to it pending)."""
        return self.session_key is not None and not self.session_key.pending

    def message(self, item: bytes, key: str, i: int) -> bytes:
        """A message element's JSON: opened, or refused (see :class:`TamperDetected`)."""
        # The hot path (a format-2 element of a format-2 session), written out: the bound
        # data is the session's part, computed once, and the id's part (see lp).
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
        return self._message(item, key, i)

    def _message(self, item: bytes, key: str, i: int) -> bytes:
        parts = split_element(item)
        if parts is None:
            if self.sealed and not self._own_cleartext:
                raise TamperDetected(key, f"message {i} is in cleartext in a sealed session")
            return item
        msg_id, value = parts
        if not self.sealed:
            raise TamperDetected(key, f"message {i} is sealed in a session without a key id")
        if value[0] == MAGIC:
            if self.strict:
                raise TamperDetected(key, f"message {i} is of format 1 in a format-2 session")
            if self.keyring is None:
                raise KeyUnavailable(kid_of(value).hex())
            return unseal(self.keyring, value, aad(b"msg", self.owner, msg_id), key, f"message {i}")
        if self.session_key is None:
            raise TamperDetected(key, f"message {i} is of format 2 in a format-1 session")
        return _open2(
            self.session_key, value[1:], lp(b"rs2 msg", self.prefix, self.owner, msg_id), key,
            f"message {i}",
        )  # fmt: skip

    def meta(self, name: str, value: bytes, key: str) -> bytes:
        """A metadata value's plaintext (``e:`` fields)."""
        if value[:1] == bytes((V2_META,)):
            if self.session_key is None:
                raise TamperDetected(key, f"metadata {name!r} is of format 2 in a format-1 session")
            version = value[1 : 1 + VERSION_LEN]
            bound = lp(b"rs2 meta", self.prefix, self.owner, name, version)
            plain = _open2(
                self.session_key, value[1 + VERSION_LEN :], bound, key, f"metadata {name!r}"
            )
            if self.seen is not None:
                self.seen(name, int.from_bytes(version, "big"))
            return plain
        if self.strict:
            raise TamperDetected(key, f"metadata {name!r} is not sealed as this layout seals")
        if self.keyring is None:
            raise KeyUnavailable(kid_of(value).hex())
        return open_meta(self.keyring, self.owner, name, value)

    def cleartext_meta(self, name: str, key: str) -> None:
        """Refuse a cleartext (``m:``) metadata entry in a sealed session."""
        if self.sealed and not self._own_cleartext:
            raise TamperDetected(key, f"metadata {name!r} is in cleartext in a sealed session")

    def scalar(self, name: str, value: bytes, key: str) -> bytes:
        """A scalar field's plaintext: sealed in format 2, cleartext in format 1."""
        if not value:
            return value
        if self.session_key is None:
            if self.sealed and value[0] == V2 and len(value) >= 1 + NONCE_LEN + 16:
                raise TamperDetected(key, f"field {name!r} is sealed, but not by this session")
            return value
        if not is_sealed_scalar(value):
            if self.strict:
                raise TamperDetected(key, f"field {name!r} is in cleartext in a sealed session")
            return value
        bound = lp(b"rs2 scalar", self.prefix, self.owner, name)
        return _open2(self.session_key, value[1:], bound, key, f"field {name!r}")


def _open2(session_key: SessionKey, value: bytes, bound: bytes, key: str, what: str) -> bytes:
    if len(value) < NONCE_LEN + 16:
        raise DecryptionFailed(key, f"{what} is not a sealed value")
    try:
        return session_key.aead.decrypt(value[:NONCE_LEN], value[NONCE_LEN:], bound)
    except InvalidTag:
        raise DecryptionFailed(key, f"{what} failed authentication") from None


def open_message(keyring: Keyring, owner: str, item: bytes, key: str, i: int) -> bytes:
    """A message element's JSON: cleartext elements pass through, sealed ones are opened."""
    parts = split_element(item)
    if parts is None:
        return item
    msg_id, value = parts
    return unseal(keyring, value, aad(b"msg", owner, msg_id), key, f"message {i}")


def open_meta(keyring: Keyring, owner: str, name: str, value: bytes) -> bytes:
    """A sealed metadata value's plaintext."""
    return unseal(keyring, value, aad(b"meta", owner, name), owner, f"metadata {name!r}")


class Sealer:
    """Seals what one write stores in session ``owner``: in format 1 under keyring key
    ``kid``, or in format 2 under the session's own key (``session_key``).
    """

    __slots__ = ("keyring", "kid", "owner", "prefix", "session_key", "versions")

    def __init__(
        self,
        keyring: Keyring | None,
        kid: bytes,
        owner: str,
        *,
        prefix: str = "",
        session_key: SessionKey | None = None,
        versions: Callable[[str], int] | None = None,
    ) -> None:
        self.keyring = keyring
        self.kid = kid
        self.owner = owner
        self.prefix = prefix
        self.session_key = session_key
        self.versions = versions

    @property
    def v2(self) -> bool:
        """Whether this sealer writes format 2 (or the key is not known yet: format 2 too)."""
        return self.session_key is not None or self.keyring is None

    def message(self, msg_id: str, body: bytes) -> bytes:
        """A message element (see :func:`seal_message`)."""
        if self.session_key is None:
            if self.keyring is None:  # the session's key is not known yet: the script says
                return b'{"id":"' + msg_id.encode() + b'",' + bytes((V2,))
            return seal_message(self.keyring, self.kid, self.owner, msg_id, body)
        nonce = os.urandom(NONCE_LEN)
        bound = lp(b"rs2 msg", self.prefix, self.owner, msg_id)
        return (
            b'{"id":"' + msg_id.encode() + b'",' + bytes((V2,)) + nonce
            + self.session_key.aead.encrypt(nonce, body, bound)
        )  # fmt: skip

    def meta(self, name: str, value: bytes) -> bytes:
        """A metadata value (format 2: with a version newer than any this store saw)."""
        if self.session_key is None:
            if self.keyring is None:
                return bytes((V2_META,))
            return seal(self.keyring, self.kid, value, aad(b"meta", self.owner, name))
        version = (self.versions(name) if self.versions else 0).to_bytes(VERSION_LEN, "big")
        nonce = os.urandom(NONCE_LEN)
        bound = lp(b"rs2 meta", self.prefix, self.owner, name, version)
        return (
            bytes((V2_META,)) + version + nonce + self.session_key.aead.encrypt(nonce, value, bound)
        )

    def scalar(self, name: str, value: bytes) -> bytes:
        """A scalar field's value (format 2 only; format 1 keeps scalars in cleartext)."""
        if not value:
            return value
        if self.session_key is None:  # format 1 keeps it clear; an unknown key sends nothing
            return bytes((V2,)) if self.keyring is None else value
        nonce = os.urandom(NONCE_LEN)
        bound = lp(b"rs2 scalar", self.prefix, self.owner, name)
        return bytes((V2,)) + nonce + self.session_key.aead.encrypt(nonce, value, bound)
