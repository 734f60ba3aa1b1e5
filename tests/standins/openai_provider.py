"""A protocol-faithful OpenAI (and Azure OpenAI) Chat Completions server for provider-tier tests.

It checks every request as OpenAI would and keeps what it found: the body against the ``openai`` SDK's
own parameter types (a pydantic ``TypeAdapter`` over ``CompletionCreateParamsNonStreaming`` or
``…Streaming``, with no key the SDK does not know) and against OpenAI's OpenAPI document
(``CreateChatCompletionRequest``, tests/openai_schema.py); a body that fails either gets OpenAI's 400
and lands in :attr:`OpenAIStandIn.invalid` (tests assert it stays empty). The key is checked as OpenAI
(``Authorization: Bearer``) or Azure (``api-key``) does. Answers are the SDK's own response models
(``ChatCompletion``, ``ChatCompletionChunk``) serialized; each answer's usage is kept in
:attr:`OpenAIStandIn.usages` and each request in :attr:`OpenAIStandIn.requests`.

What it answers: a tool call when tools are offered (and the last turn is not a tool result), JSON
matching a ``json_schema`` response format, else ``"Echo: "`` and the last user turn's text (so a
residency test sees any placeholder come back); ``max_tokens`` cuts it (``length``). Usage counts a
token per four characters of the messages and one per word of the answer; ``cached_tokens`` of the
prompt are reported as read from the cache.

Faults, on demand (:meth:`OpenAIStandIn.fail`), for the next ``times`` requests (of one model, or
any): ``429`` (``retry-after`` and ``x-ratelimit-*`` headers), ``500``, ``stall`` (no answer for
``stall_s``), ``429bare`` (``retry-after`` alone), ``midstream`` (two chunks, then an ``error``
chunk), ``401`` (the key refused), ``400`` (a context-length error), ``garbled`` (content that is
not JSON). The anthropic stand-in mirrors
this module's shape.

Latency, optional (:attr:`OpenAIStandIn.latency`, a :class:`tests.standins.latency.LatencyModel`): each
answer waits a drawn time to first token and streams at a drawn rate, and may run to a drawn length
(the echo repeated) instead of the echo's own; without one, answers come at once.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import pydantic
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionTokenLogprob,
)
from openai.types.chat import chat_completion as cc
from openai.types.chat import chat_completion_chunk as ch
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)
from openai.types.completion_usage import CompletionUsage, PromptTokensDetails

from tests.openai_schema import validate
from tests.standins.latency import LatencyModel, Timing

_PARAMS = {
    False: pydantic.TypeAdapter(CompletionCreateParamsNonStreaming),
    True: pydantic.TypeAdapter(CompletionCreateParamsStreaming),
}
_KNOWN = set(get_type_hints(CompletionCreateParamsNonStreaming)) | {"stream"}
FAULTS = ("429", "429bare", "500", "stall", "midstream", "401", "400", "garbled")


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    http_version: str = "1.1"
    client: tuple[str, int] | None = None  # the connection it came on (address, port)


@dataclass
class _Fault:
    kind: str
    model: str
    times: int


@dataclass
class OpenAIStandIn:
    """The ASGI app; serve it with :class:`tests.standins.tls.ServerThread`."""

    key: str
    cached_tokens: int = 0
    stall_s: float = 5.0
    requests: list[Recorded] = field(default_factory=list)
    usages: list[CompletionUsage] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    # x-ratelimit-* headers sent with every answer: remaining requests/tokens and their reset.
    ratelimit: dict[str, str] = field(default_factory=dict)
    latency: LatencyModel | None = None  # None: answer at once
    _faults: list[_Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Bumped by clear(): a request begun before (a stalled one answering after its client left, say)
    # reports no usage after it, so one test's leftovers do not land in the next test's sums.
    _epoch: int = 0

    def fail(self, kind: str, model: str = "", times: int = 1) -> None:
        assert kind in FAULTS, kind
        with self._lock:
            self._faults.append(_Fault(kind, model, times))

    def clear(self) -> None:
        with self._lock:
            self._epoch += 1
            self._faults.clear()
            self.requests.clear()
            self.usages.clear()
            self.invalid.clear()

    def _used(self, usage: CompletionUsage | None, epoch: int) -> None:
        with self._lock:
            if usage is not None and epoch == self._epoch:
                self.usages.append(usage)

    def _fault_for(self, model: str) -> str:
        with self._lock:
            for fault in self._faults:
                if fault.model in ("", model):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return fault.kind
        return ""

    # -- ASGI --------------------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        epoch = self._epoch
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        path = scope["path"]
        if scope["method"] != "POST" or not (
            path == "/v1/chat/completions"
            or (path.startswith("/openai/deployments/") and path.endswith("/chat/completions"))
        ):
            await _json(send, 404, _error(f"Unknown request URL: {path}", "invalid_request_error"))
            return
        azure = path.startswith("/openai/")
        given = headers.get("api-key") if azure else headers.get("authorization", "").removeprefix("Bearer ")
        if azure and "api-version=" not in scope.get("query_string", b"").decode():
            await _json(send, 404, _error("Resource not found", "invalid_request_error"))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            await _json(send, 400, _error("We could not parse the JSON body", "invalid_request_error"))
            return
        client = (scope["client"][0], scope["client"][1]) if scope.get("client") else None
        self.requests.append(Recorded(path, headers, body, scope.get("http_version", "1.1"), client))
        model = path.split("/")[3] if azure else str(body.get("model", ""))
        fault = self._fault_for(model)
        if given != self.key or fault == "401":
            shown = f"{(given or '')[:8]}****{(given or '')[-4:]}"  # as OpenAI quotes a refused key
            message = (
                f"Incorrect API key provided: {shown}. You can find your API key at platform.openai.com."
            )
            await _json(send, 401, _error(message, "invalid_request_error", "invalid_api_key"))
            return
        problem = self._check(body, azure)
        if problem:
            self.invalid.append(problem)
            await _json(send, 400, _error(problem, "invalid_request_error"))
            return
        if fault == "429bare":  # retry-after alone, no x-ratelimit-* headers
            await _json(
                send,
                429,
                _error("Rate limit reached", "requests", "rate_limit_exceeded"),
                {"retry-after": "2"},
            )
            return
        if fault == "429":
            limits = {
                "retry-after": "3",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "3s",
            }
            await _json(
                send,
                429,
                _error("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
                limits,
            )
            return
        if fault == "500":
            await _json(
                send, 500, _error("The server had an error while processing your request.", "server_error")
            )
            return
        if fault == "400":
            message = "This model's maximum context length is 128000 tokens. Please reduce the length."
            await _json(
                send, 400, _error(message, "invalid_request_error", "context_length_exceeded", "messages")
            )
            return
        if fault == "stall":
            await asyncio.sleep(self.stall_s)
        timing = self.latency.draw() if self.latency is not None else None
        answer = _answer(body, model, self.cached_tokens, timing.tokens if timing else None)
        if fault == "garbled":  # content that breaks a json response_format, as a lax vendor's might
            answer.choices[0].message.content = "{not json"
        if body.get("stream"):
            await self._stream(send, body, answer, epoch, midstream=fault == "midstream", timing=timing)
        else:
            if timing is not None and answer.usage is not None:
                tokens = answer.usage.completion_tokens
                await asyncio.sleep(timing.ttft_s + max(0, tokens - 1) * timing.per_token_s)
            self._used(answer.usage, epoch)
            await _send(send, 200, answer.model_dump_json(exclude_unset=True).encode(), self.ratelimit)

    def _check(self, body: dict[str, Any], azure: bool) -> str:
        """What OpenAI would refuse in ``body`` ("" for nothing): unknown keys, the SDK's types, the
        OpenAPI document's request schema."""
        unknown = sorted(set(body) - _KNOWN)
        if unknown:
            return f"Unrecognized request argument supplied: {unknown[0]}"
        checked = body if not azure or "model" in body else {**body, "model": "azure-deployment"}
        try:
            _PARAMS[bool(body.get("stream"))].validate_python(checked)
            validate("CreateChatCompletionRequest", checked)
        except (pydantic.ValidationError, AssertionError) as exc:
            return f"invalid request body: {str(exc)[:600]}"
        return ""

    async def _stream(
        self,
        send: Any,
        body: dict[str, Any],
        answer: ChatCompletion,
        epoch: int,
        *,
        midstream: bool,
        timing: Timing | None = None,
    ) -> None:
        if timing is not None:
            await asyncio.sleep(timing.ttft_s)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), *_header_list(self.ratelimit)],
            }
        )
        for sent, chunk in enumerate(_chunks(answer)):
            if midstream and sent == 2:
                error = {"error": {"message": "The server had an error mid-stream.", "type": "server_error"}}
                await send(
                    {"type": "http.response.body", "body": b"data: " + json.dumps(error).encode() + b"\n\n"}
                )
                await send({"type": "http.response.body", "body": b""})
                return
            if timing is not None and sent > 1 and chunk.choices and chunk.choices[0].delta.content:
                await asyncio.sleep(timing.per_token_s)  # the first token came with the first byte
            data = chunk.model_dump_json(exclude_unset=True).encode()
            await send({"type": "http.response.body", "body": b"data: " + data + b"\n\n", "more_body": True})
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = ChatCompletionChunk(
                id=answer.id,
                choices=[],
                created=answer.created,
                model=answer.model,
                object="chat.completion.chunk",
                usage=answer.usage,
            )
            self._used(answer.usage, epoch)
            data = usage.model_dump_json(exclude_unset=True).encode()
            await send({"type": "http.response.body", "body": b"data: " + data + b"\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


# -- answers -------------------------------------------------------------------------------------


def _error(message: str, kind: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _header_list(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), v.encode()) for k, v in headers.items()]


async def _send(send: Any, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    start = [(b"content-type", b"application/json"), *_header_list(headers or {})]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Any, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    await _send(send, status, json.dumps(body).encode(), headers)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(
        p.get("text", "") for p in content or () if isinstance(p, dict) and p.get("type") == "text"
    )


def sample(schema: dict[str, Any]) -> Any:
    """A value of a (simple) JSON schema: objects, arrays, strings, numbers, booleans, enums."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: sample(sub) for name, sub in props.items()}
    if kind == "array":
        return [sample(schema.get("items", {"type": "string"}))]
    return {"integer": 7, "number": 1.5, "boolean": True, "null": None}.get(str(kind), "stand-in")


def _answer(body: dict[str, Any], model: str, cached: int, length: int | None = None) -> ChatCompletion:
    """The answer to ``body``; ``length``: the text answer's natural length in words (the echo
    repeated), before ``max_tokens`` cuts it; None: the echo, at most 40 words."""
    messages = body["messages"]
    prompt = max(1, len(json.dumps(messages)) // 4)
    tools = body.get("tools") or []
    choice = body.get("tool_choice", "auto")
    last = messages[-1]
    calls: list[ChatCompletionMessageFunctionToolCall] = []
    content: str | None
    fmt = body.get("response_format") or {}
    if tools and choice != "none" and last.get("role") != "tool":
        wanted = choice["function"]["name"] if isinstance(choice, dict) else tools[0]["function"]["name"]
        tool = next(t for t in tools if t["function"]["name"] == wanted)
        args = json.dumps(sample(tool["function"].get("parameters") or {"type": "object"}))
        calls.append(
            ChatCompletionMessageFunctionToolCall(
                id="call_standin0", type="function", function={"name": wanted, "arguments": args}
            )
        )
        content, reason = None, "tool_calls"
    elif fmt.get("type") == "json_schema":
        content, reason = json.dumps(sample(fmt["json_schema"]["schema"])), "stop"
    elif fmt.get("type") == "json_object":
        content, reason = json.dumps({"answer": "stand-in"}), "stop"
    else:
        user = next((m for m in reversed(messages) if m.get("role") == "user"), last)
        echo = ("Echo: " + _text_of(user.get("content"))).split()
        words = echo[:40] if length is None else [echo[i % len(echo)] for i in range(length)]
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        reason = "length" if limit is not None and len(words) > limit else "stop"
        content = " ".join(words[:limit] if limit is not None else words)
    completion = len(content.split()) if content else len(calls) * 8
    logprobs = None
    if body.get("logprobs") and content:
        top = body.get("top_logprobs") or 0
        logprobs = cc.ChoiceLogprobs(
            content=[
                ChatCompletionTokenLogprob(
                    token=w,
                    logprob=-0.5,
                    bytes=list(w.encode()),
                    top_logprobs=[{"token": w, "logprob": -0.5, "bytes": list(w.encode())}][:top],
                )
                for w in content.split()
            ]
        )
    message = ChatCompletionMessage(role="assistant", content=content, tool_calls=calls or None)
    choices = [
        cc.Choice(index=i, message=message, finish_reason=reason, logprobs=logprobs)  # type: ignore[arg-type]
        for i in range(body.get("n") or 1)
    ]
    usage = CompletionUsage(
        prompt_tokens=prompt,
        completion_tokens=completion * len(choices),
        total_tokens=prompt + completion * len(choices),
        prompt_tokens_details=PromptTokensDetails(cached_tokens=min(cached, prompt)),
    )
    return ChatCompletion(
        id="chatcmpl-standin",
        choices=choices,
        created=int(time.time()),
        model=model,
        object="chat.completion",
        usage=usage,
    )


def _chunks(answer: ChatCompletion) -> list[ChatCompletionChunk]:
    """The answer as OpenAI streams it: a role chunk, word pieces or a tool call in parts, the end."""
    out: list[ChatCompletionChunk] = []

    def chunk(index: int, delta: ch.ChoiceDelta, reason: str | None = None, **extra: Any) -> None:
        choice = ch.Choice(index=index, delta=delta, finish_reason=reason, **extra)  # type: ignore[arg-type]
        out.append(
            ChatCompletionChunk(
                id=answer.id,
                choices=[choice],
                created=answer.created,
                model=answer.model,
                object="chat.completion.chunk",
            )
        )

    for c in answer.choices:
        chunk(c.index, ch.ChoiceDelta(role="assistant", content=""))
        for i, word in enumerate((c.message.content or "").split()):
            piece = word if i == 0 else " " + word
            lp = c.logprobs.content[i : i + 1] if c.logprobs and c.logprobs.content else None
            chunk(
                c.index, ch.ChoiceDelta(content=piece), logprobs=ch.ChoiceLogprobs(content=lp) if lp else None
            )
        for n, call in enumerate(c.message.tool_calls or ()):
            assert isinstance(call, ChatCompletionMessageFunctionToolCall)
            head = ch.ChoiceDeltaToolCall(
                index=n, id=call.id, type="function", function={"name": call.function.name, "arguments": ""}
            )
            chunk(c.index, ch.ChoiceDelta(tool_calls=[head]))
            args = call.function.arguments
            for part in (args[: len(args) // 2], args[len(args) // 2 :]):
                tail = ch.ChoiceDeltaToolCall(index=n, function={"arguments": part})
                chunk(c.index, ch.ChoiceDelta(tool_calls=[tail]))
        chunk(c.index, ch.ChoiceDelta(), c.finish_reason)
    return out
