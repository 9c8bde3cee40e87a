"""MCP over stdio with the project's input rules: each line read capped and through the strict
JSON reader before the SDK parses it.

The SDK's own stdio transport decodes stdin with ``errors="replace"`` (invalid UTF-8 becomes
U+FFFD) and parses with a reader that takes the last of two equal keys; a refused line there is
dropped without an answer. Here a line over :data:`MAX_LINE_BYTES`, not UTF-8, or not strict
JSON (duplicate keys, a BOM, NaN, 1e309) is refused with a JSON-RPC parse error (-32700) on
stdout and an audited refusal; a good line goes on to the SDK unchanged.
"""

from __future__ import annotations

import json
import sys
from types import EllipsisType
from typing import BinaryIO

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server
from mcp.shared._context_streams import create_context_streams  # what the SDK's stdio transport uses
from mcp.shared.message import SessionMessage

from kcp_opa.core import strictjson
from kcp_opa.core.errors import CodedError
from kcp_opa.service.desk import GateService

#: One JSON-RPC message: a 1 MiB action inside its envelope (the HTTP body cap).
MAX_LINE_BYTES = 2 * 1024 * 1024


def _lines(stream: BinaryIO) -> bytes | EllipsisType | None:
    """Blocking: the next line (bytes, without the newline), ``None`` at EOF; an over-long line is
    drained and returned as ``b""`` past the cap marker (``...``) so it is refused, never kept."""
    line = stream.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None
    if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
        while True:  # drain the rest of the line without holding it
            rest = stream.readline(64 * 1024)
            if not rest or rest.endswith(b"\n"):
                break
        return ...
    return line.rstrip(b"\r\n")


def _request_id(raw: bytes) -> str | int | None:
    """The id to answer a refused line with, when a lenient reading finds one (else null)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    found = value.get("id") if isinstance(value, dict) else None
    return found if isinstance(found, str | int) and not isinstance(found, bool) else None


async def serve_stdio(server: Server[object], service: GateService, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Run ``server`` over ``stdin``/``stdout`` (binary), refusing what the strict reader refuses."""
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)

    async def answer(message: types.JSONRPCMessage) -> None:
        await write_stream.send(SessionMessage(message))

    async def reader() -> None:
        async with read_writer:
            while True:
                raw = await anyio.to_thread.run_sync(_lines, stdin)
                if raw is None:
                    return
                if raw == b"":
                    continue
                refusal = None
                if raw is ...:
                    refusal, raw = CodedError(f"a message is over {MAX_LINE_BYTES} bytes", "bad_request"), b""
                else:
                    try:
                        value = strictjson.loads(raw)
                    except json.JSONDecodeError as exc:
                        refusal = CodedError(f"not strict JSON: {str(exc)[:200]}", "bad_request")
                if refusal is not None:
                    await anyio.to_thread.run_sync(service.refuse, None, "mcp-stdio", refusal)
                    error = types.ErrorData(code=types.PARSE_ERROR, message=str(refusal))
                    await answer(types.JSONRPCError(jsonrpc="2.0", id=_request_id(raw), error=error))
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
                except Exception as exc:  # the SDK's own shape check: handed on as the SDK does
                    await read_writer.send(exc)
                    continue
                await read_writer.send(SessionMessage(message))

    async def writer() -> None:
        async with write_reader:
            async for item in write_reader:
                text = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await anyio.to_thread.run_sync(_write, stdout, text.encode("utf-8"))

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(writer)
        await server.run(read_stream, write_stream, server.create_initialization_options())
        group.cancel_scope.cancel()


def _write(stdout: BinaryIO, data: bytes) -> None:
    stdout.write(data)
    stdout.flush()


def run_stdio(server: Server[object], service: GateService) -> None:
    """Serve on the process's stdin and stdout."""
    anyio.run(serve_stdio, server, service, sys.stdin.buffer, sys.stdout.buffer)
