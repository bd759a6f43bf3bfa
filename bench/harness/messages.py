"""Realistic messages: ~300 characters of mixed-script prose, a third with a tool call."""

from __future__ import annotations

import random

import orjson

from redis_session.models import Message, MessageRole, ToolCall

_VOCAB = (
    "the a an of to in for on with by from about and or but not this that these those it "
    "we you they our your their is are was were be been can could should would will may "
    "session agent model tool query result cache latency request response user assistant "
    "redis cluster worker queue retry timeout token context window summary history message "
    "deploy config schema index field value key list hash script lua atomic append trim "
    "weather forecast Paris Berlin Tokyo invoice order customer refund shipping address "
    "database table column migration backup restore error warning trace log metric alert "
    "function argument return type string number boolean array object null undefined "
    "please thanks sure here is what I found let me check again quickly carefully "
    "café naïve résumé straße déjà-vu 東京 数据 ユーザー → ✓ 42 3.14 2024-05-01 v1.2.3 200 OK"
)
_WORDS = _VOCAB.split()
_TOOLS = ("search_docs", "get_weather", "run_sql", "read_file", "create_ticket", "fetch_url")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 16))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", ".", ".", "?", "!", ":"))


def _text(rng: random.Random, target: int) -> str:
    out = ""
    while len(out) < target:
        out = f"{out} {_sentence(rng)}" if out else _sentence(rng)
    return out[:target].rstrip()


def build_messages(rng: random.Random, count: int, start: int = 0) -> list[Message]:
    """Messages alternating user/assistant, ~300 chars of content, a third of them (assistant
    ones) with a tool call.
    """
    out: list[Message] = []
    for i in range(start, start + count):
        role = MessageRole.USER if i % 2 == 0 and i % 3 != 1 else MessageRole.ASSISTANT
        calls: list[ToolCall] = []
        if i % 3 == 1:
            args = {"query": _text(rng, rng.randint(20, 60)), "limit": rng.randint(1, 50)}
            calls.append(
                ToolCall(
                    id=f"call_{rng.getrandbits(64):016x}",
                    name=rng.choice(_TOOLS),
                    input=orjson.dumps(args).decode(),
                    output=_text(rng, rng.randint(60, 160)),
                )
            )
        content = _text(rng, rng.randint(270, 330))
        out.append(Message(role=role, content=content, tool_calls=calls))
    return out
