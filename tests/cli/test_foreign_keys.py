"""One bad key breaks nothing else: another program's string, hash and list among good
sessions, at a session's hash and message-list names and at a name the store never uses, on a
real Redis. ``ls`` and ``stats`` list the good sessions and name each foreign key, ``doctor``
reports them, ``delete`` removes the good sessions and leaves every foreign key as it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from redis_session.keys import KeySchema
from tests.cli.conftest import Place, invoke, seed

pytestmark = pytest.mark.redis

WRITERS: dict[str, Callable[[Any, str], object]] = {
    "string": lambda client, name: client.set(name, "another program's"),
    "hash": lambda client, name: client.hset(name, "owner", "another program"),
    "list": lambda client, name: client.rpush(name, "a", "b"),
}


@pytest.fixture
def planted(real: Place) -> tuple[Place, dict[str, str], dict[str, Any]]:
    """Sessions s0..s3 on the real Redis; s1's hash and s2's message list, and one name the
    store never uses, replaced by another program's string, hash and list. Returns where,
    {foreign key: type}, and each one's DUMP."""
    seed(real, 4, messages=2)
    schema = KeySchema(real.prefix)
    client = redis.Redis.from_url(real.url)
    foreign = {
        schema.session("s1").meta: "string",
        schema.session("s2").msgs: "hash",
        f"{real.prefix}someone-else:cache": "list",
    }
    for name, held in foreign.items():
        client.delete(name)
        WRITERS[held](client, name)
    dumps = {name: client.dump(name) for name in foreign}
    client.close()
    return real, foreign, dumps


def test_ls_lists_the_good_sessions_and_names_the_foreign_keys(planted: Any) -> None:
    place, foreign, _ = planted
    result = invoke("ls", *place.args(), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [s["key"] for s in data["sessions"]] == ["s3", "s0"]
    skipped = {s["redis_key"]: s["key"] for s in data["skipped"]}
    session_names = {n: h for n, h in foreign.items() if "someone-else" not in n}
    assert skipped == {n: k for n, k in zip(session_names, ["s1", "s2"], strict=True)}
    human = invoke("ls", *place.args())
    assert human.exit_code == 0
    for name, held in session_names.items():
        assert f"Redis key {name!r} holds a {held} this store did not write" in human.stderr
    assert "s3" in human.stdout and "s0" in human.stdout


def test_stats_counts_the_good_sessions_and_names_the_foreign_keys(planted: Any) -> None:
    place = planted[0]
    result = invoke("stats", *place.args(), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["sessions"] == 2 and data["messages"] == 4
    assert {s["key"] for s in data["skipped"]} == {"s1", "s2"}
    human = invoke("stats", *place.args())
    assert human.exit_code == 0 and human.stderr.count("skipped: ") == 2


def test_doctor_reports_every_foreign_key_under_the_prefix(planted: Any) -> None:
    place, foreign, _ = planted
    result = invoke("doctor", *place.args(), "--json")
    check = next(
        c for c in json.loads(result.stdout)["checks"] if c["name"] == "keys under the prefix"
    )
    assert check["status"] == "warn"
    assert check["detail"].startswith("3 of ")
    for name, held in foreign.items():
        assert f"{name!r} ({held})" in check["detail"]


def test_doctor_finds_nothing_foreign_in_a_clean_store(real: Place) -> None:
    seed(real, 3, messages=2)
    result = invoke("doctor", *real.args(), "--json")
    check = next(
        c for c in json.loads(result.stdout)["checks"] if c["name"] == "keys under the prefix"
    )
    assert check["status"] == "ok", check


def test_delete_removes_the_good_and_leaves_every_foreign_key(planted: Any) -> None:
    place, foreign, dumps = planted
    result = invoke("delete", *place.args(), "--json", "s0", "s1", "s2", "s3")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["deleted"] == ["s0", "s3"] and data["missing"] == []
    assert {s["key"] for s in data["skipped"]} == {"s1", "s2"}
    error = json.loads(result.stderr)
    assert error["type"] == "ForeignKey" and "not deleted" in error["error"]
    client = redis.Redis.from_url(place.url)
    try:
        assert {name: client.dump(name) for name in foreign} == dumps
    finally:
        client.close()
