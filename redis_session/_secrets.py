"""Salts, checksums and secrets (sans-I/O generators; see ``_core``): opaque bytes in hashes
under the prefix's global hash tag.
"""

from __future__ import annotations

from collections.abc import Callable

from ._args import as_bytes
from ._args import name as name_arg
from ._base import CoreBase
from ._requests import Commands, Op, ScriptCall
from .errors import InvalidArgument, ItemNotFound
from .status import Ctx, check

SECRET_PREFIX = "s:"


class SecretOps(CoreBase):
    """The salt, checksum and secret operations of a store."""

    def _get_item(self, hash_key: str, field: str, kind: str, item: str) -> Op[bytes]:
        (value,) = yield Commands([("HGET", hash_key, field)])
        if value is None:
            raise ItemNotFound(kind, item)
        return bytes(value)

    def get_salt(self, name: str) -> Op[bytes]:
        item = name_arg(name)
        return (yield from self._get_item(self.schema.salts, item, "salt", item))

    def set_salt(self, name: str, salt: bytes) -> Op[None]:
        item = name_arg(name)
        yield Commands([("HSET", self.schema.salts, item, as_bytes(salt, "salt"))])

    def get_checksum(self, name: str) -> Op[bytes]:
        item = name_arg(name)
        return (yield from self._get_item(self.schema.checksums, item, "checksum", item))

    def set_checksum(self, name: str, checksum: bytes) -> Op[None]:
        item = name_arg(name)
        keys = [self.schema.salts, self.schema.checksums]
        args = (item, as_bytes(checksum, "checksum"))
        check(
            (yield ScriptCall("set_checksum", keys, args)), Ctx(keys=keys, kind="salt", name=item)
        )

    def get_secret(self, name: str) -> Op[bytes]:
        item = name_arg(name)
        return (
            yield from self._get_item(self.schema.secrets, SECRET_PREFIX + item, "secret", item)
        )

    def set_secret(self, name: str, value: bytes) -> Op[None]:
        item = name_arg(name)
        keys = [self.schema.secrets]
        args = (SECRET_PREFIX + item, as_bytes(value, "value"))
        check((yield ScriptCall("set_secret", keys, args)), Ctx(keys=keys, name=item))

    def delete_secret(self, name: str) -> Op[bool]:
        item = name_arg(name)
        keys = [self.schema.secrets]
        reply = check(
            (yield ScriptCall("set_secret", keys, (SECRET_PREFIX + item,))),
            Ctx(keys=keys, name=item),
        )
        return bool(reply[1])

    def list_secrets(self) -> Op[list[str]]:
        (fields,) = yield Commands([("HKEYS", self.schema.secrets)])
        names = [bytes(f).decode("utf-8", "replace") for f in fields]
        return sorted(n[len(SECRET_PREFIX) :] for n in names if n.startswith(SECRET_PREFIX))

    def migrate_secrets(
        self, reencrypt: Callable[[bytes], bytes], new_salt: bytes, new_checksum: bytes
    ) -> Op[int]:
        if not callable(reencrypt):
            raise InvalidArgument("reencrypt", "must be callable")
        salt = as_bytes(new_salt, "new_salt")
        checksum = as_bytes(new_checksum, "new_checksum")
        (flat,) = yield Commands([("HGETALL", self.schema.secrets)])
        version = bytes(flat.get(b"v", b""))
        pairs: list[bytes] = []
        for field, old in flat.items():
            if bytes(field).startswith(SECRET_PREFIX.encode()):
                pairs += (bytes(field), as_bytes(reencrypt(bytes(old)), "reencrypt(...)"))
        keys = [self.schema.secrets, self.schema.salts, self.schema.checksums]
        reply = check(
            (yield ScriptCall("migrate_secrets", keys, (version, salt, checksum, *pairs))),
            Ctx(keys=keys, name="secrets"),
        )
        return int(reply[1])
