from __future__ import annotations

import pytest

from redis_session import (
    ChildAlreadyMerged,
    ChildNotFound,
    CorruptData,
    DuplicateSession,
    ForeignKey,
    InvalidArgument,
    ItemNotFound,
    MigrationConflict,
    SessionError,
    SessionExpired,
    SessionNotFound,
    StaleCompaction,
)
from redis_session.status import Ctx, Status, check


@pytest.mark.parametrize(
    ("reply", "ctx", "error"),
    [
        ([Status.NOT_FOUND], Ctx("k"), SessionNotFound),
        ([Status.NOT_FOUND], Ctx("k", child=True), ChildNotFound),
        ([Status.EXPIRED], Ctx("k"), SessionExpired),
        ([Status.EXISTS], Ctx("k"), DuplicateSession),
        ([Status.OUT_OF_RANGE, 3], Ctx("k", index=5), InvalidArgument),
        ([Status.STALE], Ctx("k", index=1, expect_id="m"), StaleCompaction),
        ([Status.MERGED], Ctx("k"), ChildAlreadyMerged),
        ([Status.CONFLICT], Ctx(), MigrationConflict),
        ([Status.MISSING], Ctx(kind="salt", name="n"), ItemNotFound),
        ([Status.WRONG_TYPE, 2, b"string"], Ctx("k", keys=["a", "b"]), ForeignKey),
        ([Status.DAMAGED, 1, b"foreign"], Ctx("k", keys=["a", "b"]), ForeignKey),
        ([Status.DAMAGED, 1, b"missing"], Ctx("k", keys=["a", "b"]), CorruptData),
    ],
)
def test_every_status_maps_to_one_error(reply: list[int], ctx: Ctx, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        check(reply, ctx)
    assert type(info.value) is error
    assert isinstance(info.value, SessionError)


def test_ok_passes_the_reply_through() -> None:
    assert check([0, b"x"], Ctx()) == [0, b"x"]


@pytest.mark.parametrize("reply", [None, [], [b"0"], [99], "OK"])
def test_malformed_replies_are_session_errors(reply: object) -> None:
    with pytest.raises(SessionError):
        check(reply, Ctx())


def test_error_tree() -> None:
    assert issubclass(SessionExpired, SessionNotFound)
    assert issubclass(SessionNotFound, LookupError)
    assert issubclass(InvalidArgument, ValueError)
    assert issubclass(ItemNotFound, LookupError)
    e = CorruptData("k", "bad")
    assert e.key == "k" and "'k'" in str(e)


def test_a_foreign_key_is_worded_alike_whatever_found_it() -> None:
    wrong = [Status.WRONG_TYPE, 2, b"string"]
    for reply, held in ((wrong, "string"), ([Status.DAMAGED, 2, b"foreign"], "hash")):
        with pytest.raises(ForeignKey) as info:
            check(reply, Ctx("k", keys=["rs:meta:{k}", "rs:msgs:{k}"]))
        assert (info.value.key, info.value.redis_key, info.value.held) == ("k", "rs:msgs:{k}", held)
        assert str(info.value) == (
            f"corrupt data for session 'k': Redis key 'rs:msgs:{{k}}' holds a {held} this store "
            "did not write"
        )
