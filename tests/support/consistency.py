"""Checks what writers were told against what Redis holds: reusable by any fault or soak test.

A :class:`Ledger` records, per session, the messages whose write was acknowledged (in streams
that must keep their order: one per writer, one per merged child), the writes whose outcome is
unknown (the call raised), what acknowledged compactions removed, and what must be absent.
Every message content is unique, so contents identify messages (compaction summaries and merge
summaries get their ids inside the store). :func:`check_histories` compares a ledger with the
histories read back; :func:`audit_keys` scans a prefix for keys without TTL, orphaned child
keys, data keys of sessions without their hash, and index entries of sessions that are gone.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from redis_session.keys import CHILD_MARKER, KeySchema, parent_of


@dataclass
class Ledger:
    """What the writers of one run were told (merge ledgers of several writers with ``+=``)."""

    streams: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """session key → stream name → acknowledged contents, in acknowledgement order."""
    contiguous: set[tuple[str, str]] = field(default_factory=set)
    """(session, stream) whose contents were written by one script, so stay adjacent."""
    unknown: dict[str, set[str]] = field(default_factory=dict)
    """session key → contents of writes that raised (applied or not: either is correct)."""
    removed: dict[str, set[str]] = field(default_factory=dict)
    """session key → contents that acknowledged compactions removed."""
    maybe_removed: dict[str, set[str]] = field(default_factory=dict)
    """session key → contents that compactions with an unknown outcome may have removed."""
    absent: dict[str, set[str]] = field(default_factory=dict)
    """session key → contents that must not be there (e.g. a discarded child's messages)."""
    live: set[str] = field(default_factory=set)
    """Sessions that must exist at the end."""
    deleted: set[str] = field(default_factory=set)
    """Sessions whose deletion was acknowledged (nothing of them may remain)."""

    def ack(self, session: str, stream: str, *contents: str) -> None:
        self.streams.setdefault(session, {}).setdefault(stream, []).extend(contents)

    def maybe(self, session: str, *contents: str) -> None:
        self.unknown.setdefault(session, set()).update(contents)

    def acknowledged(self) -> int:
        return sum(len(s) for streams in self.streams.values() for s in streams.values())

    def __iadd__(self, other: Ledger) -> Ledger:
        for session, streams in other.streams.items():
            for name, contents in streams.items():
                self.ack(session, name, *contents)
        self.contiguous |= other.contiguous
        for mine, theirs in (
            (self.unknown, other.unknown), (self.removed, other.removed),
            (self.maybe_removed, other.maybe_removed), (self.absent, other.absent),
        ):  # fmt: skip
            for session, held in theirs.items():
                mine.setdefault(session, set()).update(held)
        self.live |= other.live
        self.deleted |= other.deleted
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "streams": self.streams,
            "contiguous": sorted(self.contiguous),
            **{
                name: {k: sorted(v) for k, v in getattr(self, name).items()}
                for name in ("unknown", "removed", "maybe_removed", "absent")
            },
            "live": sorted(self.live),
            "deleted": sorted(self.deleted),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ledger:
        pairs = {(str(s), str(n)) for s, n in data["contiguous"]}
        ledger = cls(streams=data["streams"], contiguous=pairs)
        for name in ("unknown", "removed", "maybe_removed", "absent"):
            setattr(ledger, name, {k: set(v) for k, v in data[name].items()})
        ledger.live, ledger.deleted = set(data["live"]), set(data["deleted"])
        return ledger


@dataclass
class Verdict:
    """The outcome of :func:`check_histories`; ``ok`` when every list is empty."""

    acknowledged: int = 0
    lost: list[tuple[str, str]] = field(default_factory=list)
    duplicated: list[tuple[str, str, int]] = field(default_factory=list)
    out_of_order: list[tuple[str, str, str]] = field(default_factory=list)
    split: list[tuple[str, str]] = field(default_factory=list)
    unexpected: list[tuple[str, str]] = field(default_factory=list)
    missing_sessions: list[str] = field(default_factory=list)
    unknown_applied: int = 0
    unknown_absent: int = 0

    @property
    def ok(self) -> bool:
        return not (
            self.lost or self.duplicated or self.out_of_order or self.split or self.unexpected
            or self.missing_sessions
        )  # fmt: skip

    def summary(self) -> dict[str, int]:
        return {
            "acknowledged": self.acknowledged, "lost": len(self.lost),
            "duplicated": len(self.duplicated), "out_of_order": len(self.out_of_order),
            "split": len(self.split), "unexpected": len(self.unexpected),
            "missing_sessions": len(self.missing_sessions),
            "unknown_applied": self.unknown_applied, "unknown_absent": self.unknown_absent,
        }  # fmt: skip


def check_histories(ledger: Ledger, histories: dict[str, list[str] | None]) -> Verdict:
    """Compare ``ledger`` with ``histories`` (session → stored contents in order; None when the
    session is gone). Acknowledged and not removed: present exactly once, each stream in order
    (and adjacent when written by one script). Unknown outcome: present at most once. Removed
    or absent: not present. Anything else present: unexpected. No content twice, ever.
    """
    verdict = Verdict(acknowledged=ledger.acknowledged())
    for session in sorted(ledger.live):
        if histories.get(session) is None:
            verdict.missing_sessions.append(session)
    for session, stored in sorted(histories.items()):
        if stored is None:
            continue
        counts = Counter(stored)
        position = {c: i for i, c in enumerate(stored)}
        verdict.duplicated += [(session, c, n) for c, n in counts.items() if n > 1]
        removed = ledger.removed.get(session, set())
        maybe_removed = ledger.maybe_removed.get(session, set())
        known: set[str] = set()
        for name, contents in ledger.streams.get(session, {}).items():
            known.update(contents)
            seen: list[int] = []
            for c in contents:
                if c in removed:
                    continue
                if c not in position:
                    if c not in maybe_removed:
                        verdict.lost.append((session, c))
                    continue
                if seen and position[c] <= seen[-1]:
                    verdict.out_of_order.append((session, name, c))
                seen.append(position[c])
            if (session, name) in ledger.contiguous and seen and seen[-1] - seen[0] >= len(seen):
                verdict.split.append((session, name))
        for c in ledger.unknown.get(session, set()):
            known.add(c)
            if c in position:
                verdict.unknown_applied += 1
            else:
                verdict.unknown_absent += 1
        must_not = ledger.absent.get(session, set()) | (removed - maybe_removed)
        verdict.unexpected += [(session, c) for c in stored if c in must_not or c not in known]
    return verdict


# -- keys -------------------------------------------------------------------------------------

_UNESCAPE = re.compile(r"%(25|7B|7D)")
_PLAIN = {"25": "%", "7B": "{", "7D": "}"}
_BODY = re.compile(r"^\{(?P<root>[^{}]*)\}(?P<rest>.*)$", re.S)
SESSION_KINDS = ("meta", "msgs", "ids", "kids", "done", "mark", "pop")
CHILD_KINDS = ("child", "cmsgs", "cids", "stage")
TREE_KINDS = ("meta", "msgs", "ids", "kids", "done", "child", "cmsgs", "cids")
"""Keys that expire exactly at their tree's deadline (the marker outlives it by the grace
period, a pop key and a staging list may go sooner)."""


def _unescape(text: str) -> str:
    return _UNESCAPE.sub(lambda m: _PLAIN[m.group(1)], text)


def session_key_of(body: str) -> str | None:
    """The session (or child) key a key body ``{root}rest`` was built from (inverse of
    ``KeySchema._body``), or None if it is not one."""
    m = _BODY.match(body)
    if m is None:
        return None
    root = "" if m["root"] == "%" else _unescape(m["root"])
    return root + _unescape(m["rest"])


@dataclass
class KeyAudit:
    """What :func:`audit_keys` found under a prefix; ``ok`` when every list is empty."""

    keys: int = 0
    without_ttl: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    """Child keys whose parent session, or whose own child hash, is gone."""
    dangling: list[str] = field(default_factory=list)
    """A session's messages, id window or children without its hash (the expiry marker alone
    outlives the tree, by design)."""
    off_deadline: list[str] = field(default_factory=list)
    """Keys of a tree that do not expire at the tree's deadline (its root's meta field x)."""
    stale_index: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    """Keys of sessions whose deletion was acknowledged."""
    tombstones: int = 0
    """Ended children remembered (in ``done`` zsets; at most 100 per session)."""
    delete_tokens: int = 0
    """Deletes' call tokens kept for a retry of the delete (``gone:`` strings, with a TTL)."""
    unknown_keys: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.without_ttl or self.orphans or self.dangling or self.stale_index
            or self.leftovers or self.unknown_keys or self.off_deadline
        )  # fmt: skip


def audit_keys(
    client: Any,
    prefix: str,
    *,
    ttl: bool,
    deleted: set[str] = frozenset(),  # type: ignore[assignment]
) -> KeyAudit:
    """Scan every key under ``prefix`` (single server). With ``ttl``, every key but the index
    and the event log (documented as TTL-less: the index's entries are pruned by ``create``
    and the reaper, the log is trimmed to ``event_log_max``) must have a TTL."""
    schema = KeySchema(prefix)
    audit = KeyAudit()
    names = sorted(bytes(k).decode() for k in client.scan_iter(match=f"{prefix}*", count=1000))
    audit.keys = len(names)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.pttl(name)
        pipe.pexpiretime(name)
    replies = pipe.execute()
    ttls = dict(zip(names, replies[::2], strict=True))
    expiry = dict(zip(names, replies[1::2], strict=True))
    present = set(names)
    deadlines: dict[str, int] = {}  # root meta key -> its tree's deadline
    for name in names:
        kind, _, body = name[len(prefix) :].partition(":")
        if name == schema.index_of(""):
            members = client.zrange(name, 0, -1)
            for member in members:
                key = bytes(member).decode()
                if schema.session(key).meta not in present:
                    audit.stale_index.append(key)
                if key in deleted:
                    audit.leftovers.append(f"index entry {key}")
            continue
        if name == schema.log_of(""):
            continue
        if ttl and ttls[name] == -1:
            audit.without_ttl.append(name)
        if kind == "gone" and session_key_of(body) is not None:
            audit.delete_tokens += 1
            continue
        decoded = session_key_of(body)
        if decoded is None or kind not in SESSION_KINDS + CHILD_KINDS:
            audit.unknown_keys.append(name)
            continue
        key = decoded
        root = key.split(CHILD_MARKER, 1)[0] if kind in CHILD_KINDS else key
        root_meta = schema.session(root).meta
        if ttl and kind in TREE_KINDS and root_meta in present and expiry[name] != -2:
            # A key that expired between the scan and its PEXPIRETIME (-2), or whose tree's meta
            # hash expired before its deadline was read (no "x"), left with its tree: not a
            # deadline off its tree's, so only trees still whole are compared.
            if root_meta not in deadlines:
                deadlines[root_meta] = int(client.hget(root_meta, "x") or -1)
            if deadlines[root_meta] != -1 and expiry[name] != deadlines[root_meta]:
                audit.off_deadline.append(f"{name} ({expiry[name]} != {deadlines[root_meta]})")
        if kind in CHILD_KINDS:
            parsed = parent_of(key) if CHILD_MARKER in key else None
            if parsed is None:
                audit.unknown_keys.append(name)
                continue
            parent_meta = schema.session(parsed[0]).meta
            if parent_meta not in present or schema.child(key).meta not in present:
                audit.orphans.append(name)
        else:
            if kind == "done":
                audit.tombstones += client.zcard(name)
            if key in deleted:
                audit.leftovers.append(name)
            if kind in ("msgs", "ids", "kids", "done") and schema.session(key).meta not in present:
                audit.dangling.append(name)
    return audit
