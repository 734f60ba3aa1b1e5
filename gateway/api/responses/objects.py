"""The Responses API's answer objects (msgspec structs, encoded as OpenAI's schema has them): the
``response`` object, its output items, and how a collected answer becomes them."""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec

from gateway.wire import responses as rp
from gateway.wire.chat_response import TiergateInfo
from tiers import Choice, Completion, TokenLogprob, Usage


class TopLogProb(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int]


class LogProb(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogProb]


class OutputTextPart(msgspec.Struct, tag_field="type", tag="output_text"):
    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[LogProb] = msgspec.field(default_factory=list)


class OutputMessage(msgspec.Struct, tag_field="type", tag="message"):
    id: str
    status: str
    content: list[OutputTextPart]
    role: str = "assistant"


class FunctionCall(msgspec.Struct, tag_field="type", tag="function_call"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: str


OutputItem = OutputMessage | FunctionCall


class InputTokensDetails(msgspec.Struct):
    cached_tokens: int
    cache_write_tokens: int = 0  # tiergate bills no prompt-cache writes


class OutputTokensDetails(msgspec.Struct):
    reasoning_tokens: int = 0  # no model here reasons


class ResponseUsage(msgspec.Struct):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ErrorBody(msgspec.Struct):
    code: str  # one of OpenAI's ResponseErrorCode values
    message: str


class IncompleteDetails(msgspec.Struct):
    reason: str


class Response(msgspec.Struct, kw_only=True):
    id: str
    created_at: int
    status: str  # in_progress, completed, incomplete or failed
    model: str
    output: list[OutputItem]
    instructions: str | None
    max_output_tokens: int | None
    parallel_tool_calls: bool
    previous_response_id: str | None
    store: bool
    temperature: float | None
    top_p: float | None
    text: dict[str, Any]
    tool_choice: Any
    tools: list[Any]
    metadata: dict[str, str]
    user: str | msgspec.UnsetType = msgspec.UNSET  # OpenAI's schema: a string, or absent
    safety_identifier: str | msgspec.UnsetType = msgspec.UNSET
    prompt_cache_key: str | msgspec.UnsetType = msgspec.UNSET
    max_tool_calls: int | None = None
    reasoning: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    completed_at: int | None = None
    error: ErrorBody | None = None
    incomplete_details: IncompleteDetails | None = None
    usage: ResponseUsage | msgspec.UnsetType = msgspec.UNSET  # not null in OpenAI's schema
    output_text: str = ""
    truncation: str = "disabled"
    object: str = "response"
    tiergate: TiergateInfo | msgspec.UnsetType = msgspec.UNSET


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def opening(
    response_id: str, request: rp.ResponsesRequest, tools: list[rp.FunctionTool], model: str
) -> Response:
    """The response as it begins (``in_progress``, no output): what it echoes of the request."""
    choice = request.tool_choice
    return Response(
        id=response_id,
        created_at=int(time.time()),
        status="in_progress",
        model=model,
        output=[],
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        previous_response_id=request.previous_response_id,
        store=request.stored,
        temperature=request.temperature,
        top_p=request.top_p,
        text={"format": msgspec.to_builtins(request.format)},
        tool_choice=msgspec.to_builtins(choice) if choice is not None else "auto",
        tools=[_tool(t) for t in tools],
        metadata=dict(request.metadata or {}),
        user=request.user if request.user is not None else msgspec.UNSET,
        safety_identifier=_given(request.safety_identifier),
        prompt_cache_key=_given(request.prompt_cache_key),
        max_tool_calls=request.max_tool_calls,
        # the effort asked for, echoed; no model here reasons, so there is never a summary
        reasoning=(
            {"effort": request.reasoning.effort, "summary": None} if request.reasoning else msgspec.UNSET
        ),
    )


def _given(value: str | None) -> str | msgspec.UnsetType:
    return value if value is not None else msgspec.UNSET


def _tool(tool: rp.FunctionTool) -> dict[str, Any]:
    """A tool as the response echoes it: ``strict`` and ``parameters`` always there (may be null)."""
    body = {"type": "function", "name": tool.name, "parameters": tool.parameters, "strict": tool.strict}
    return body | ({"description": tool.description} if tool.description is not None else {})


def logprobs_of(tokens: list[TokenLogprob]) -> list[LogProb]:
    return [
        LogProb(
            t.token,
            t.logprob,
            t.bytes or [],
            [TopLogProb(a.token, a.logprob, a.bytes or []) for a in t.top],
        )
        for t in tokens
    ]


def usage_of(usage: Usage) -> ResponseUsage:
    return ResponseUsage(
        usage.prompt_tokens,
        InputTokensDetails(usage.cached_tokens),
        usage.completion_tokens,
        OutputTokensDetails(),
        usage.total_tokens,
    )


def output_of(
    choice: Choice, message_id: str, call_ids: list[str], max_calls: int | None = None
) -> list[OutputItem]:
    """A choice as output items: its text as one message (when it has text or no calls), then one
    ``function_call`` item per call (item ids from ``call_ids``), the first ``max_calls`` of them
    (``max_tool_calls``: OpenAI ignores the model's further calls)."""
    incomplete = choice.finish_reason == "length"
    calls = choice.tool_calls if max_calls is None else choice.tool_calls[:max_calls]
    items: list[OutputItem] = []
    if choice.text or not calls:
        part = OutputTextPart(choice.text, logprobs=logprobs_of(choice.logprobs or []))
        items.append(OutputMessage(message_id, "incomplete" if incomplete else "completed", [part]))
    for call, item_id in zip(calls, call_ids, strict=True):
        items.append(FunctionCall(item_id, call.id, call.name, call.arguments, "completed"))
    return items


def finished(response: Response, answer: Completion, output: list[OutputItem]) -> Response:
    """The response once its answer is whole: status, output, usage."""
    choice = answer.choices[0]
    incomplete = choice.finish_reason == "length"
    text = "".join(p.text for i in output if isinstance(i, OutputMessage) for p in i.content)
    return msgspec.structs.replace(
        response,
        status="incomplete" if incomplete else "completed",
        completed_at=None if incomplete else int(time.time()),
        incomplete_details=IncompleteDetails("max_output_tokens") if incomplete else None,
        output=output,
        output_text=text,
        usage=usage_of(answer.usage),
    )


def failed(response: Response, code: str, message: str) -> Response:
    return msgspec.structs.replace(response, status="failed", error=ErrorBody(code, message))


_encoder = msgspec.json.Encoder()


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


_response = msgspec.json.Decoder(Response)


def decode_response(data: bytes) -> Response:
    return _response.decode(data)
