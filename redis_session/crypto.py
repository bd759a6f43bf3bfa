"""Encryption at rest: key derivation, the keyring's records, sealing and opening values.

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
another session, another message or another field fails authentication.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from .errors import CorruptData, DecryptionFailed, InvalidArgument, KeyUnavailable

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


def new_kid(taken: Mapping[bytes, object]) -> bytes:
    """A fresh random key id not in ``taken``."""
    while True:
        kid = os.urandom(KID_LEN)
        if kid not in taken:
            return kid


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
    """``(id, sealed value)`` of a sealed message element; None for a cleartext one."""
    if item[:7] != b'{"id":"':
        return None
    end = item.find(b'",', 7)
    if end < 0 or item[end + 2 : end + 3] != b"\x01":
        return None
    try:
        return item[7:end].decode("ascii"), item[end + 2 :]
    except UnicodeDecodeError:
        return None


def element_kid(item: bytes) -> bytes:
    """The key id of a sealed message element, or b"" for a cleartext one."""
    parts = split_element(item)
    return b"" if parts is None else kid_of(parts[1])


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


@dataclass(frozen=True, slots=True)
class Sealer:
    """Seals what one write stores in session ``owner`` under key ``kid``."""

    keyring: Keyring
    kid: bytes
    owner: str

    def message(self, msg_id: str, body: bytes) -> bytes:
        """A message element (see :func:`seal_message`)."""
        return seal_message(self.keyring, self.kid, self.owner, msg_id, body)

    def meta(self, name: str, value: bytes) -> bytes:
        """A metadata value."""
        return seal(self.keyring, self.kid, value, aad(b"meta", self.owner, name))
