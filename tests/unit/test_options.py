"""StoreOptions: one validated object, given as keywords or whole, split from a URL's keywords."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import timedelta
from typing import Any

import pytest

from redis_session import AsyncRedisStore, InvalidArgument, RedisStore, StoreOptions
from redis_session._transport import endpoint as _endpoint
from redis_session.errors import UnknownOption
from redis_session.options import split_store_options


def test_keywords_and_an_options_object_make_the_same_store() -> None:
    by_keywords = RedisStore.from_url("memory://", ttl=60, max_history_turns=5, prefix="p:")
    whole = StoreOptions(ttl=60, max_history_turns=5, prefix="p:")
    by_object = RedisStore.from_url("memory://", options=whole)
    assert by_keywords.options == by_object.options == whole
    assert by_object.ttl == timedelta(seconds=60) and by_object.prefix == "p:"
    over = RedisStore.from_url("memory://", options=whole, ttl=5)  # a keyword wins
    assert over.options.ttl_ms == 5_000 and over.options.max_history_turns == 5


@pytest.mark.parametrize(
    ("given", "argument"),
    [({"ttl": 0}, "ttl"), ({"ttl": "1h"}, "ttl"), ({"max_history_turns": -1}, "max_history_turns"),
     ({"dedup_window": 10}, "dedup_window"), ({"prefix": "a{b"}, "prefix"),
     ({"kdf_work": 40}, "kdf_work"), ({"publish_events": 1}, "publish_events"),
     ({"passphrase": ""}, "passphrase"), ({"read_cache_bytes": True}, "read_cache_bytes")],
)  # fmt: skip
def test_a_bad_option_is_named_once_whoever_takes_it(given: dict[str, Any], argument: str) -> None:
    for make in (lambda: StoreOptions(**given), lambda: RedisStore.from_url("memory://", **given)):
        with pytest.raises(InvalidArgument) as info:
            make()
        assert info.value.argument == argument


def test_an_unknown_option_is_a_type_error_naming_it() -> None:
    """(``from_url`` hands keywords that are no option to redis-py's client.)"""
    with pytest.raises(TypeError, match="^tll: no store option has this name"):
        RedisStore(object(), options=StoreOptions(), tll=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^tll: no store option has this name"):
        AsyncRedisStore(object(), tll=5)  # type: ignore[arg-type]


def test_from_url_keywords_are_split_by_the_options_fields() -> None:
    mine, client = split_store_options(
        {"ttl": 1, "lifecycle_hook": None, "socket_timeout": 2, "options": None}
    )
    assert mine == {"ttl": 1, "lifecycle_hook": None, "options": None}
    assert client == {"socket_timeout": 2}


def test_one_list_of_options() -> None:
    """A new option is one field: the stores take every field, and nothing else names them."""
    fields = {f.name for f in dataclasses.fields(StoreOptions) if f.init}
    assert fields == StoreOptions.names()
    for store in (RedisStore, AsyncRedisStore):
        params = inspect.signature(store.__init__).parameters
        assert not fields & set(params), "an option named again in a store's signature"


def test_the_passphrase_never_shows() -> None:
    options = StoreOptions(passphrase="correct horse")
    assert "correct horse" not in repr(options) and "correct horse" not in str(options)


@pytest.mark.parametrize(
    "url",
    ["memory://", "redis://127.0.0.1:1/0", "redis+cluster://127.0.0.1:1",
     "redis+sentinel://127.0.0.1:1/mymaster", "unix:///nonexistent.sock"],
)  # fmt: skip
@pytest.mark.parametrize("cls", [RedisStore, AsyncRedisStore])
def test_a_misspelt_keyword_is_refused_at_once_on_every_scheme(url: str, cls: Any) -> None:
    # Nothing listens on these addresses: the keyword is refused before any connection.
    with pytest.raises(UnknownOption, match=r"^tll: neither a store option \(.*\bttl\b"):
        cls.from_url(url, tll=5)
    with pytest.raises(TypeError, match="tll"):  # also what Python raises for a bad keyword
        cls.from_url(url, tll=5)
    with pytest.raises(InvalidArgument, match="tll"):
        cls.from_url(url, tll=5)


def test_redis_py_s_own_keywords_pass_and_the_constructor_names_the_options() -> None:
    store = RedisStore.from_url("memory://", socket_timeout=2, max_connections=4, ttl=5)
    assert store.ttl is not None
    with pytest.raises(UnknownOption, match=r"^tll: no store option has this name"):
        RedisStore(store.client, tll=5)
    store.close()
    cluster = _endpoint.client_keywords(True)
    assert {"read_from_replicas", "socket_timeout", "password"} <= cluster
    assert "read_from_replicas" not in _endpoint.client_keywords(False)
