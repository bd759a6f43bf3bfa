from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from redis_session import InvalidArgument
from redis_session.keys import KeySchema, check_key

schema = KeySchema("rs:")
user_keys = st.text(min_size=1).map(lambda s: s.encode("utf-8", "replace").decode("utf-8"))
agents = st.text(min_size=1, max_size=20).map(lambda s: s.encode("utf-8", "replace").decode())


def names(key: str) -> tuple[str, str, str]:
    k = schema.session(key)
    return k.meta, k.msgs, k.ids


@given(user_keys)
def test_all_keys_of_a_session_share_one_slot(key: str) -> None:
    assert len({key_slot(n.encode()) for n in names(key)}) == 1


@given(user_keys, agents, st.integers(min_value=0))
def test_children_and_grandchildren_share_the_parents_slot(key: str, agent: str, ns: int) -> None:
    child = f"{key}:child:{agent}:{ns}"
    grandchild = f"{child}:child:{agent}:{ns + 1}"
    slots = {key_slot(n.encode()) for k in (key, child, grandchild) for n in names(k)}
    assert len(slots) == 1


@given(user_keys, user_keys)
def test_distinct_keys_never_share_a_name(a: str, b: str) -> None:
    if a != b:
        assert not set(names(a)) & set(names(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [("{a}", "%7Ba%7D"), ("a}", "a%7D"), ("", "%"), ("%", "%25"), (":child:", "%:child:")],
)
def test_escaping_is_injective_on_tricky_pairs(a: str, b: str) -> None:
    if a:
        assert set(names(a)).isdisjoint(names(b))


def test_empty_root_still_has_a_tag() -> None:
    meta = schema.session(":child:x:1").meta
    assert "{%}" in meta
    assert key_slot(meta.encode()) == key_slot(schema.session(":child:y:2").msgs.encode())


def test_layout_is_readable() -> None:
    assert schema.session("user-42").meta == "rs:meta:{user-42}"
    assert schema.session("user-42:child:planner:1").msgs == "rs:msgs:{user-42}:child:planner:1"


@pytest.mark.parametrize("bad", ["", 1, None, b"x", "\udc80"])
def test_check_key_rejects(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="key"):
        check_key(bad)


@pytest.mark.parametrize("prefix", ["a{", "}", 3])
def test_prefix_may_not_pick_the_slot(prefix: object) -> None:
    with pytest.raises(InvalidArgument, match="prefix"):
        KeySchema(prefix)  # type: ignore[arg-type]
