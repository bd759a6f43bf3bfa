"""Salts, checksums and secrets (sans-I/O generators; see ``_core``): opaque bytes in hashes
under the prefix's global hash tag.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import contracts
from ..errors import InvalidArgument, ItemNotFound
from ..keys import KeySchema
from ..status import Ctx, check
from .args import as_bytes, token
from .args import name as name_arg
from .limits import STAGE_LEASE_MS, Limits
from .requests import Commands, Op

SECRET_PREFIX = "s:"


class Secrets:
    """The salt, checksum and secret operations of a store."""

    def __init__(self, schema: KeySchema, limits: Limits) -> None:
        self.schema = schema
        self.limits = limits

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
        call = contracts.set_checksum(
            salts=self.schema.salts,
            checksums=self.schema.checksums,
            name=item,
            checksum=as_bytes(checksum, "checksum"),
        )
        check((yield call), Ctx(keys=call.keys, kind="salt", name=item))

    def get_secret(self, name: str) -> Op[bytes]:
        item = name_arg(name)
        return (
            yield from self._get_item(self.schema.secrets, SECRET_PREFIX + item, "secret", item)
        )

    def set_secret(self, name: str, value: bytes) -> Op[None]:
        item = name_arg(name)
        call = contracts.set_secret(
            secrets=self.schema.secrets, field=SECRET_PREFIX + item, value=as_bytes(value, "value")
        )
        check((yield call), Ctx(keys=call.keys, name=item))

    def delete_secret(self, name: str) -> Op[bool]:
        item = name_arg(name)
        call = contracts.set_secret(
            secrets=self.schema.secrets, field=SECRET_PREFIX + item, value=None
        )
        done = contracts.parsed(
            contracts.SecretSet, check((yield call), Ctx(keys=call.keys, name=item))
        )
        return bool(done.changed)

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
        stage = f"{self.schema.secrets}#{token()}"
        batch = self.limits.batch_messages
        staged, inline = 0, pairs
        if len(pairs) // 2 > batch:  # many: staged in steps, then swapped in
            for i in range(0, len(pairs), 2 * batch):
                yield Commands(
                    [
                        ("HSET", stage, *pairs[i : i + 2 * batch]),
                        ("PEXPIRE", stage, STAGE_LEASE_MS),
                    ]
                )
            staged, inline = len(pairs) // 2, []
        call = contracts.migrate_secrets(
            secrets=self.schema.secrets,
            salts=self.schema.salts,
            checksums=self.schema.checksums,
            stage=stage,
            version=version,
            salt=salt,
            checksum=checksum,
            staged=staged,
            pairs=inline,
        )
        reply = yield call
        return contracts.parsed(
            contracts.Migrated, check(reply, Ctx(keys=call.keys, name="secrets"))
        ).migrated
