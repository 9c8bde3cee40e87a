"""One evaluator worker process: a compiled bundle, evaluated one input at a time.

Started by kcp_opa.decide.pool (``main`` in a new interpreter). It reads frames from
stdin and writes frames to its own copy of stdout (anything else that prints lands on stderr).
A frame is a 4-byte big-endian length and ASCII JSON (``ensure_ascii``: every Python string,
a lone surrogate too, comes back exactly as it was sent). The first frame is the bundle
(``source``, ``manifest``, ``data``, ``modules``, ``sha256``, ``entrypoint``, ``plan_cache``);
the worker answers ``{"ready": pid}`` or ``{"error": ...}``, then each ``{"input": ...}`` with
``{"value": ...}`` or ``{"error": ...}``. End of stdin ends the worker. Whatever rego-cpp does to
this process (SIGSEGV, abort, out of memory) costs only the input it held.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from kcp_opa.core.jsonread import JsonDict, JsonObject, text

if TYPE_CHECKING:
    from kcp_opa.decide.engine import RegopyEngine

_HEADER = struct.Struct(">I")
#: A frame larger than this is refused: no input the contract admits comes near it.
MAX_FRAME = 1 << 30


class FrameError(Exception):
    """The other side closed the pipe, or sent what is not a frame."""


def encode(message: JsonObject) -> bytes:
    body = json.dumps(message, ensure_ascii=True, separators=(",", ":"), default=_plain).encode("ascii")
    return _HEADER.pack(len(body)) + body


def _plain(value: object) -> object:
    """Mappings and sequences the input holds that are not dicts and lists (read-only views)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple | list | set | frozenset):
        return list(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def decode(body: bytes) -> JsonDict:
    message = json.loads(body)
    if not isinstance(message, dict):
        raise FrameError("a frame holds one JSON object")
    return message


def read_frame(stream: IO[bytes]) -> JsonDict:
    header = _read_exactly(stream, _HEADER.size)
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise FrameError(f"frame of {size} bytes")
    return decode(_read_exactly(stream, size))


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise FrameError("end of stream")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _object(frame: JsonObject, key: str) -> JsonObject:
    """``frame[key]``, which must be a JSON object: read as empty, a bundle's data or an action's
    input would be evaluated as "nothing there" instead of being refused."""
    value = frame.get(key)
    if not isinstance(value, Mapping):
        raise FrameError(f"the frame's {key} is {type(value).__name__}, not an object")
    return value


def _load(start: JsonObject) -> RegopyEngine:
    from kcp_opa.compile.bundle import LoadedBundle
    from kcp_opa.decide.engine import RegopyEngine

    bundle = LoadedBundle(
        source=str(start["source"]),
        manifest=_object(start, "manifest"),
        data=_object(start, "data"),
        modules={name: str(source) for name, source in _object(start, "modules").items()},
        sha256=str(start["sha256"]),
    )
    cache = text(start.get("plan_cache"))
    # The parent checked the manifest and planned the bundle in a child already (preflight).
    return RegopyEngine(bundle, str(start["entrypoint"]), preflight=False, plan_cache=Path(cache) if cache else None)


def serve(requests: IO[bytes], replies: IO[bytes]) -> int:
    """Answer frames until ``requests`` ends; 0 at a clean end, 2 when the bundle cannot load."""
    try:
        start = read_frame(requests)
    except FrameError:
        return 0
    try:
        engine = _load(start)
    except Exception as exc:  # EngineLoadError and whatever regopy raises: the parent reports it
        replies.write(encode({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"}))
        replies.flush()
        return 2
    replies.write(encode({"ready": os.getpid()}))
    replies.flush()
    while True:
        try:
            request = read_frame(requests)
        except FrameError:
            return 0
        try:
            document = _object(request, "input")
        except FrameError as exc:  # this input's error (the gate's DENY engine_error), never an empty input
            replies.write(encode({"error": f"FrameError: {exc}"}))
            replies.flush()
            continue
        result = engine.evaluate(document)
        reply = {"value": result.value} if result.error is None else {"error": result.error}
        replies.write(encode(reply))
        replies.flush()


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent shuts its workers down (end of stdin)
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray output must never corrupt a frame
    with os.fdopen(os.dup(sys.stdin.fileno()), "rb") as requests, replies:
        return serve(requests, replies)


if __name__ == "__main__":
    raise SystemExit(main())
