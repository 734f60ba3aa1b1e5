"""A protocol-faithful stand-in for Anthropic's Messages API, on loopback over TLS (a test CA).

Every request is checked as Anthropic checks it: the ``x-api-key`` (a wrong one: 401
``authentication_error``) and ``anthropic-version`` headers, and the body against the official SDK's
own parameter types (a pydantic ``TypeAdapter`` over ``anthropic.types.MessageCreateParamsNonStreaming``
or ``…Streaming``; a field no type has is a 400).  Answers are built with the SDK's own models
(``anthropic.types.Message``; the ``RawMessageStreamEvent`` types as ``event:``/``data:`` lines).

What it answers: a ``tool_use`` of the named (or first) tool when tools may be used and the last turn
is not a tool result; JSON that fits ``output_config.format``'s schema when one is given; else a
sentence naming what it saw (``reply``).  A stop sequence found in the text ends it there
(``stop_sequence``); ``max_tokens`` cuts it (a token is a word here).  Usage counts a token per 4
bytes of the request; a request carrying ``cache_control`` reports its prefix as written to the cache
the first time and read from it afterwards.

:meth:`fail` injects one failure into the next requests (``times`` of them, then it answers again):
``429`` (with ``retry-after`` and ``anthropic-ratelimit-*``), ``529`` (overloaded_error), ``500``,
``400`` (a prompt too long), ``401`` (the key refused), ``stall`` (no byte for ``stall_s``), and
``midstream`` (a streamed answer's first words, then an ``error`` event).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import ssl
import threading
from pathlib import Path
from typing import Any, Self

import anthropic.types as at
import anthropic.types.message_create_params as mcp
import pydantic
from aiohttp import web

from tests.conftest import free_port
from tests.standins.tls import TestCA

VERSION = "2023-06-01"
KEY = "sk-ant-standin-key-0123456789"
# The API takes these sampling fields though the SDK's types no longer list them.
SAMPLING = {"temperature": (0.0, 1.0), "top_p": (0.0, 1.0), "top_k": (0, None)}
_FIELDS = set(mcp.MessageCreateParamsBase.__annotations__) | {"stream"}
_plain = pydantic.TypeAdapter(mcp.MessageCreateParamsNonStreaming)
_streamed = pydantic.TypeAdapter(mcp.MessageCreateParamsStreaming)


def example(schema: dict[str, Any]) -> Any:
    """A small value that fits ``schema`` (objects, arrays, enums, the scalar types)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object" or "properties" in schema:
        return {k: example(v) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [example(schema.get("items") or {"type": "string"})]
    return {"integer": 7, "number": 1.5, "boolean": True, "null": None}.get(str(kind), "Paris")


def _drain(value: Any) -> None:
    """Iterate what pydantic validates lazily (the SDK's ``Iterable[...]`` fields), so it is checked."""
    if isinstance(value, dict):
        for item in value.values():
            _drain(item)
    elif isinstance(value, str | bytes | int | float | bool) or value is None:
        return
    elif hasattr(value, "__iter__"):
        for item in value:
            _drain(item)


def check_body(body: Any) -> str:
    """Why Anthropic would refuse this Messages API body ("" when it would not)."""
    if not isinstance(body, dict):
        return "the body is no JSON object"
    extra = set(body) - _FIELDS - set(SAMPLING)
    if extra:
        return f"{sorted(extra)[0]}: Extra inputs are not permitted"
    for name, (low, high) in SAMPLING.items():
        value = body.get(name)
        if value is not None and (value < low or (high is not None and value > high)):
            return f"{name}: out of range"
    params = {k: v for k, v in body.items() if k not in SAMPLING}
    try:
        _drain((_streamed if body.get("stream") else _plain).validate_python(params))
    except pydantic.ValidationError as exc:
        return f"invalid request: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}"
    roles = [m["role"] for m in body["messages"]]
    if any(a == b for a, b in itertools.pairwise(roles)):
        return "messages: roles must alternate between user and assistant"
    return ""


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_standin"}
    return web.json_response(body, status=status, headers=headers)


def _sse(event: pydantic.BaseModel) -> bytes:
    kind = event.type
    return (
        b"event: "
        + kind.encode()
        + b"\ndata: "
        + event.model_dump_json(exclude_none=False).encode()
        + b"\n\n"
    )


class AnthropicStandIn:
    """``with AnthropicStandIn(folder) as s``: serving on ``s.url`` (https); ``s.ca_file`` trusts it."""

    def __init__(self, folder: Path, key: str = KEY, reply: str = "Hello from the stand-in") -> None:
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.key = key
        self.reply = reply
        ca = TestCA.make(folder)
        self.ca_file = ca.ca_file
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(ca.cert_file, ca.key_file)
        self.fault = ""
        self.faults_left = 0
        self.stall_s = 5.0
        self.remaining = (1000, 400_000)  # anthropic-ratelimit-requests-/tokens-remaining
        self.requests: list[dict[str, Any]] = []  # every body that passed the checks
        self.usages: list[dict[str, Any]] = []  # every usage reported, in order
        self.refused: list[str] = []  # why each refused request was refused
        self._cached: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def fail(self, fault: str, times: int = 1) -> None:
        self.fault, self.faults_left = fault, times

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the Anthropic stand-in did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=32 << 20)
        app.router.add_post("/v1/messages", self._messages)
        runner = self._runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=self._context)
        self._loop.run_until_complete(site.start())
        self._started.set()
        self._loop.run_forever()

    # -- checks --------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        requests, tokens = self.remaining
        return {
            "anthropic-ratelimit-requests-limit": "1000",
            "anthropic-ratelimit-requests-remaining": str(requests),
            "anthropic-ratelimit-tokens-limit": "400000",
            "anthropic-ratelimit-tokens-remaining": str(tokens),
            "request-id": "req_standin",
        }

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("x-api-key") != self.key:
            self.refused.append("key")
            return _error(401, "authentication_error", "invalid x-api-key")
        if request.headers.get("anthropic-version") != VERSION:
            self.refused.append("version")
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "invalid_request_error", "the body is no JSON")
        if why := check_body(body):
            self.refused.append(why)
            return _error(400, "invalid_request_error", why)
        self.requests.append(body)
        fault = self.fault if self.faults_left > 0 else ""
        if fault:
            self.faults_left -= 1
        if fault == "429":
            headers = {**self._headers(), "retry-after": "7", "anthropic-ratelimit-requests-remaining": "0"}
            return _error(429, "rate_limit_error", "Number of requests has exceeded your rate limit", headers)
        if fault == "529":
            return _error(529, "overloaded_error", "Overloaded")
        if fault == "500":
            return _error(500, "api_error", "Internal server error")
        if fault == "400":
            return _error(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum")
        if fault == "401":
            return _error(401, "authentication_error", "invalid x-api-key")
        if fault == "stall":
            await asyncio.sleep(self.stall_s)
            if request.transport is None or request.transport.is_closing():
                return web.Response(status=499)  # the client gave up: nothing answered, nothing counted
        message = self._answer(body)
        self.usages.append(message.usage.model_dump())
        if body.get("stream"):
            return await self._stream(request, message, fault == "midstream")
        return web.Response(
            body=message.model_dump_json(), content_type="application/json", headers=self._headers()
        )

    # -- answers -------------------------------------------------------------------------------

    def _usage(self, body: dict[str, Any], output_tokens: int) -> at.Usage:
        size = len(json.dumps(body)) // 4
        raw = json.dumps(body)
        if '"cache_control"' not in raw:
            return at.Usage(input_tokens=size, output_tokens=output_tokens)
        prefix = hashlib.sha256(json.dumps([body.get("tools"), body.get("system")]).encode()).hexdigest()
        cached = size // 2
        seen = prefix in self._cached
        self._cached.add(prefix)
        return at.Usage(
            input_tokens=size - cached,
            output_tokens=output_tokens,
            cache_read_input_tokens=cached if seen else 0,
            cache_creation_input_tokens=0 if seen else cached,
        )

    def _answer(self, body: dict[str, Any]) -> at.Message:
        content: list[dict[str, Any]] = []
        reason, sequence = "end_turn", None
        last = body["messages"][-1]
        after_tool = isinstance(last["content"], list) and any(
            b.get("type") == "tool_result" for b in last["content"]
        )
        choice = body.get("tool_choice") or {"type": "auto"}
        if body.get("tools") and choice["type"] != "none" and not after_tool:
            tool = next((t for t in body["tools"] if t["name"] == choice.get("name")), body["tools"][0])
            content.append(
                {
                    "type": "tool_use",
                    "id": "toolu_standin01",
                    "name": tool["name"],
                    "input": example(tool["input_schema"]),
                }
            )
            reason = "tool_use"
        else:
            fmt = (body.get("output_config") or {}).get("format")
            if fmt:
                text = json.dumps(example(fmt["schema"]))
            else:
                images = sum(
                    1
                    for m in body["messages"]
                    if isinstance(m["content"], list)
                    for b in m["content"]
                    if b.get("type") == "image"
                )
                text = f"{self.reply}: {len(body['messages'])} turns, {images} images, done."
                if after_tool:
                    text = f"{self.reply}: the tool said {json.dumps(last['content'][0].get('content'))}"
            for stop in body.get("stop_sequences") or ():
                if stop in text:
                    text, reason, sequence = text[: text.index(stop)], "stop_sequence", stop
                    break
            words = text.split(" ")
            if len(words) > body["max_tokens"]:
                text, reason = " ".join(words[: body["max_tokens"]]), "max_tokens"
            content.append({"type": "text", "text": text})
        output = sum(len(str(b.get("text", b.get("input", ""))).split(" ")) for b in content)
        return at.Message.model_validate(
            {
                "id": "msg_standin01",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": reason,
                "stop_sequence": sequence,
                "usage": self._usage(body, output).model_dump(),
            }
        )

    async def _stream(self, request: web.Request, message: at.Message, fail: bool) -> web.StreamResponse:
        response = web.StreamResponse(headers={**self._headers(), "Content-Type": "text/event-stream"})
        await response.prepare(request)
        start = message.model_copy(update={"content": [], "stop_reason": None, "stop_sequence": None})
        start.usage = message.usage.model_copy(update={"output_tokens": 1})
        await response.write(_sse(at.RawMessageStartEvent(type="message_start", message=start)))
        for index, block in enumerate(message.content):
            if block.type == "text":
                opening: Any = at.TextBlock(type="text", text="")
                pieces = [at.TextDelta(type="text_delta", text=w) for w in _pieces(block.text)]
            else:
                assert isinstance(block, at.ToolUseBlock)
                opening = block.model_copy(update={"input": {}})
                text = json.dumps(block.input)
                pieces = [
                    at.InputJSONDelta(type="input_json_delta", partial_json=text[i : i + 8])
                    for i in range(0, len(text), 8)
                ]
            await response.write(
                _sse(
                    at.RawContentBlockStartEvent(
                        type="content_block_start", index=index, content_block=opening
                    )
                )
            )
            for n, piece in enumerate(pieces):
                if fail and n == 2:
                    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
                    await response.write(b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n")
                    return response
                await response.write(
                    _sse(at.RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=piece))
                )
            await response.write(_sse(at.RawContentBlockStopEvent(type="content_block_stop", index=index)))
        usage = at.MessageDeltaUsage(
            output_tokens=message.usage.output_tokens,
            input_tokens=message.usage.input_tokens,
            cache_read_input_tokens=message.usage.cache_read_input_tokens,
            cache_creation_input_tokens=message.usage.cache_creation_input_tokens,
            server_tool_use=None,
        )
        delta = at.raw_message_delta_event.Delta(
            stop_reason=message.stop_reason, stop_sequence=message.stop_sequence
        )
        await response.write(_sse(at.RawMessageDeltaEvent(type="message_delta", delta=delta, usage=usage)))
        await response.write(_sse(at.RawMessageStopEvent(type="message_stop")))
        return response


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
