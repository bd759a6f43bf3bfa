"""Fuzz the C module (``redis_session/_transport/_speedups.c``) under AddressSanitizer and
UBSan.

Builds the module with ``-fsanitize=address,undefined`` (any report aborts the process), loads
it in a fresh interpreter in place of the installed one, then feeds each entry point damaged
input and checks it against pydantic's own validation:

- ``decode``: the encoder's every shape, then those elements damaged (bytes cut, inserted,
  replaced: quotes, backslashes, brackets, digits, NUL, invalid UTF-8, lone surrogate escapes),
  truncated at every length, with huge numbers, deep nesting (tool calls in arrays in arrays),
  surrogate pairs, and values that are not bytes. Each element is either left to validation
  (None) or read exactly as validation reads it.
- ``configure``: wrong types and classes whose layout is not the one the module writes
  (refused with ``TypeError``, the module unchanged).

    python tools/fuzz_speedups.py [--examples N] [--seed S]

Exit status 0 when nothing was found; a sanitizer report, an exception or a mismatch exits
non-zero with what it found. ``tests/unit/test_fuzz_speedups.py`` runs a small such fuzz in the
suite.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "redis_session" / "_transport" / "_speedups.c"
FLAGS = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=all"]  # fmt: skip


def runtime(name: str) -> str | None:
    """The path of gcc's sanitizer runtime ``name`` (``libasan.so``), or None."""
    try:
        done = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                              text=True, check=False, timeout=30)  # fmt: skip
    except OSError:
        return None
    path = done.stdout.strip()
    return path if done.returncode == 0 and os.path.isabs(path) and Path(path).exists() else None


def build(target: Path) -> None:
    """Compile ``_speedups.c`` with the sanitizers into ``target``."""
    ldshared = sysconfig.get_config_var("LDSHARED") or "gcc -shared"
    shared = shlex.split(sysconfig.get_config_var("CCSHARED") or "")
    include = sysconfig.get_paths()["include"]
    command = [
        *shlex.split(ldshared),
        *shared,
        *FLAGS,
        "-I",
        include,
        str(SOURCE),
        "-o",
        str(target),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=300)


FUZZ = r"""
import importlib.util, random, sys
spec = importlib.util.spec_from_file_location("redis_session._transport._speedups", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["redis_session._transport._speedups"] = module
spec.loader.exec_module(module)
from datetime import UTC, datetime, timedelta
from redis_session import Message, ToolCall, Usage, codec
from redis_session._transport import fast as _fast
assert _fast.DECODE is module.decode, _fast.STATUS.summary()
examples, seed = int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)

def reference(raw):
    try:
        return codec._validated([raw])[0]
    except (ValueError, TypeError):
        return None

def same(got, raw):
    ref = reference(raw)
    assert ref is not None, ("accepted what validation refuses", raw)
    assert got == ref and got.model_fields_set == ref.model_fields_set, raw
    assert [type(v) for v in vars(got).values()] == [type(v) for v in vars(ref).values()], raw
    assert got.model_dump_json() == ref.model_dump_json(), raw

TEXT = ["", "a", "é", "😀", '"', "\\", "\n", "\x00", "\x1f", "\u2028", "x" * 300, "ab\"c\\d"]
def text():
    return "".join(rng.choice(TEXT) for _ in range(rng.randrange(4)))

def message():
    calls = [ToolCall(id=text(), name=text(), input=text(), output=text(),
                      thought=rng.random() < 0.3) for _ in range(rng.randrange(3))]
    stamp = datetime(rng.randrange(1, 10000), rng.randrange(1, 13), rng.randrange(1, 29),
                     rng.randrange(24), rng.randrange(60), rng.randrange(60),
                     rng.choice([0, rng.randrange(1_000_000)]), tzinfo=UTC)
    return Message(id="m%d" % rng.randrange(10**9), role=rng.choice(["user", "assistant", "tool",
                   "system", "function", "model"]), content=text(), timestamp=stamp,
                   tool_calls=calls, author=text(), tokens=rng.choice(TOKENS),
                   usage=rng.choice([None, None, Usage(input_tokens=rng.choice([0, 1, 2**40]),
                   output_tokens=rng.choice([0, 5]), requests=rng.choice([0, 1]))]))

TOKENS = [None, None, 0, 1, 9, 10, 99, 2**40, 2**40 - 1, 123456789012]

PIECES = [b'"', b"\\", b"}", b"{", b",", b":", b"]", b"[", b"0", b"9", b"Z", b"T", b"-", b".",
          b" ", b"\x00", b"\x1f", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\\u", b"\\ud800",
          b"\\udc00", b"\\ud83d\\ude00", b"\\u0000", b"null", b"true", b"1e999",
          b"99999999999999999999", b"-0", b"[[[[[[[[", b"]]]]]]]]", b'"tool_calls":[',
          b'"tokens":', b"1099511627777", b"0123", b"1.5", b"12e3", b'"usage":{',
          b'"input_tokens":', b'"requests":', b"{}"]

def damaged(body):
    out = body
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(out) + 1)
        cut = rng.randrange(4)
        out = out[:at] + rng.choice(PIECES + [bytes([rng.randrange(256)])]) + out[at + cut:]
    return out

checked = left = 0
for n in range(examples):
    m = message()
    body = codec.encode_message(m)
    candidates = [body, damaged(body), body[: rng.randrange(len(body) + 1)]]
    if n % 50 == 0:
        deep = b'{"id":"d","role":"user","timestamp":"2024-01-01T00:00:00Z","tool_calls":'
        candidates.append(deep + b"[" * rng.randrange(1, 5000))
        candidates.append(body.replace(b'"timestamp":"', b'"timestamp":"' + b"9" * 400))
    got, lefts, size = module.decode(candidates)
    assert lefts == [i for i, m in enumerate(got) if m is None], lefts
    assert size == sum(map(len, candidates)), size
    for raw, msg in zip(candidates, got):
        if msg is None:
            left += 1
        else:
            same(msg, raw)
            checked += 1
    assert got[0] is not None, body  # the encoder's own form: never left

for odd in ([None], [1], ["text"], [bytearray(b"{}")], [memoryview(b"{}")], [b""]):
    got, lefts, size = module.decode(odd)
    assert got == [None] and lefts == [0] and size == 0, odd
for bad in (None, 1, object()):
    try:
        module.decode(bad)
    except TypeError:
        pass
    else:
        raise AssertionError("decode took a non-sequence")

class NoDict:
    __slots__ = ()
for args in ((), (1, 2, 3, 4, 5, 6, 7, 8, 9), ({}, NoDict, NoDict, UTC, {}, {}, set, NoDict, {}),
             ({}, Message, ToolCall, UTC, {}, {}, list, Usage, {}),
             ({}, int, ToolCall, UTC, {}, {}, set, Usage, {}),
             ({}, Message, ToolCall, UTC, {}, {}, set, NoDict, {}),
             ({}, Message, ToolCall, UTC, {}, {}, set, Message, {}),
             ({}, Message, ToolCall, UTC, {}, {}, set, Usage, {"requests": 0})):
    try:
        module.configure(*args)
    except (TypeError, KeyError):
        pass
    else:
        raise AssertionError(("configure took", args))
got, _, _ = module.decode([codec.encode_message(Message(role="user", content="still"))])
assert got[0] is not None and got[0].content == "still"  # unchanged by the refusals
print(f"fuzzed {examples} messages: {checked} elements read as validation reads them, "
      f"{left} left to validation; configure refused every wrong layout")
"""


def main(argv: list[str] | None = None) -> int:
    """Build, fuzz, and exit with the fuzzing process's status (2: no sanitizer runtime)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--examples", type=int, default=20_000, help="messages to damage")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    asan, ubsan = runtime("libasan.so"), runtime("libubsan.so")
    if asan is None or ubsan is None:
        print("fuzz_speedups: gcc's libasan/libubsan not found", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fuzz-speedups-") as tmp:
        module = Path(tmp, "_speedups" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
        build(module)
        env = {
            **os.environ,
            "LD_PRELOAD": f"{asan} {ubsan}",
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
            "PYTHONMALLOC": "malloc",
        }
        env.pop("REDIS_SESSION_PURE_PYTHON", None)
        done = subprocess.run(
            [sys.executable, "-c", FUZZ, str(module), str(args.examples), str(args.seed)],
            cwd=ROOT, env=env, check=False,
        )  # fmt: skip
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
