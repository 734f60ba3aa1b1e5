"""Anthropic's Messages API without a server: the strict request and its translation to the chat request,
an answer's events back as a ``message`` and as Anthropic's stream (each read by the ``anthropic`` SDK's
own types, the stream accumulated by the SDK's own code), errors in Anthropic's shape, and the key read
from ``x-api-key``."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import msgspec
import pydantic
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.accounts.tenants import key_of
from gateway.api.messages.checks import check_request
from gateway.api.messages.stream import MessageEvents
from gateway.api.messages.translate import chat_request, finished_of, message_of
from gateway.errors import (
    AuthenticationFailed,
    GatewayError,
    InvalidRequest,
    ModelNotFound,
    PermissionDenied,
    RateLimited,
    ServiceUnavailable,
    UpstreamFailed,
    anthropic_error_body,
    anthropic_status,
)
from gateway.wire import messages as am
from gateway.wire.chat import ImagePart, NamedToolChoice, TextPart
from tiers import Event, Finished, Started, TextDelta, ToolCallDelta, Usage, assemble

WEATHER = {
    "name": "get_weather",
    "description": "Get the weather.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def chat_of(body: bytes, count: bool = False) -> Any:
    """The chat request the endpoint makes of ``body``: decoded, its values checked, translated."""
    request = am.parse_count(body) if count else am.parse_create(body)
    check_request(request, "default", None)
    return chat_request(request)


def translate(**body: Any) -> Any:
    fields = {"model": "edge", "max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}], **body}
    return chat_of(json.dumps(fields).encode())


def test_the_sampling_fields_and_the_system_text_pass_on() -> None:
    chat = translate(
        system=[
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be kind."},
        ],
        stop_sequences=["\n\n", "END"],
        temperature=0.3,
        top_p=0.9,
        top_k=20,
        metadata={"user_id": "u-1"},
        stream=True,
        thinking={"type": "disabled"},
    )
    assert [(m.role, m.content) for m in chat.messages] == [("system", "Be brief.\nBe kind."), ("user", "Hi")]
    assert (chat.max_tokens, chat.stop, chat.temperature, chat.top_p, chat.top_k, chat.user, chat.stream) == (
        32,
        ["\n\n", "END"],
        0.3,
        0.9,
        20,
        "u-1",
        True,
    )


def test_image_blocks_become_image_parts() -> None:
    chat = translate(
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                    {"type": "text", "text": "Which is nicer?"},
                ],
            }
        ]
    )
    parts = chat.messages[0].content
    assert [type(p) for p in parts] == [ImagePart, ImagePart, TextPart]
    assert parts[0].image_url.url == "data:image/png;base64,iVBOR"
    assert parts[1].image_url.url == "https://example.com/cat.jpg"


def test_tool_use_and_tool_result_become_tool_calls_and_tool_messages() -> None:
    chat = translate(
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [
                            {"type": "text", "text": "no station"},
                            {
                                "type": "image",
                                "source": {"type": "url", "url": "https://example.com/map.png"},
                            },
                        ],
                    },
                    {"type": "text", "text": "And so?"},
                ],
            },
        ],
    )
    roles = [m.role for m in chat.messages]
    assert roles == ["user", "assistant", "tool", "tool", "user"]
    assistant = chat.messages[1]
    assert assistant.content == "Let me look."
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in assistant.tool_calls] == [
        ("toolu_1", "get_weather", {"city": "Paris"}),
        ("toolu_2", "get_weather", {"city": "Rome"}),
    ]
    assert (chat.messages[2].tool_call_id, chat.messages[2].content) == ("toolu_1", "sunny")
    assert (chat.messages[3].tool_call_id, chat.messages[3].content) == ("toolu_2", "Error: no station")
    # the result's image and the user's text follow the tool messages, as a user turn
    assert [type(p) for p in chat.messages[4].content] == [ImagePart, TextPart]
    assert chat.tools[0].function.parameters == WEATHER["input_schema"]


@pytest.mark.parametrize(
    ("choice", "tool_choice", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
    ],
)
def test_tool_choice(choice: dict[str, Any], tool_choice: str, parallel: bool | None) -> None:
    chat = translate(tools=[WEATHER], tool_choice=choice)
    assert (chat.tool_choice, chat.parallel_tool_calls) == (tool_choice, parallel)


def test_tool_choice_naming_a_tool_and_auto_without_tools() -> None:
    named = translate(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}).tool_choice
    assert isinstance(named, NamedToolChoice) and named.function.name == "get_weather"
    assert translate(tool_choice={"type": "auto"}).tool_choice is None  # nothing to choose from: fine


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"temperature": 1.5}, "temperature"),
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "'edge' does not support tool types: web_search_20250305.",
        ),
        ({"tools": [{"name": "f"}]}, "tools.0.custom.input_schema: Field required"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages.0.content.0: document blocks (PDF and text documents) are not supported on this model",
        ),
        ({"container": "c1"}, "container: containers are not supported on this model ('edge')."),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "other"}}, "not among the tools"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}
                ]
            },
            "belongs in an assistant message",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
                ]
            },
            "belongs in a user message",
        ),
    ],
)
def test_what_is_refused_is_a_400_saying_what(body: dict[str, Any], words: str) -> None:
    fields = {"model": "edge", "max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}], **body}
    fields = {k: v for k, v in fields.items() if v is not None}
    with pytest.raises(InvalidRequest) as caught:
        chat_of(json.dumps(fields).encode())
    assert words in caught.value.message


def test_count_tokens_takes_the_prompt_without_max_tokens() -> None:
    body = {
        "model": "cloud",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [WEATHER],
    }
    chat = chat_of(json.dumps(body).encode(), count=True)
    assert [m.role for m in chat.messages] == ["system", "user"] and chat.max_tokens is None and chat.tools
    with pytest.raises(InvalidRequest, match="max_tokens"):
        chat_of(json.dumps({**body, "max_tokens": 5}).encode(), count=True)


# -- the answer, JSON and streamed -----------------------------------------------------------------

TEXT: list[Event] = [
    Started("edge-0", "smol"),
    TextDelta("Hello"),
    TextDelta(" there"),
    Finished("stop", Usage(7, 2)),
]
CALL: list[Event] = [
    Started("edge-0", "smol"),
    ToolCallDelta(0, id="call_abc", name="get_weather"),
    ToolCallDelta(0, arguments='{"city": '),
    ToolCallDelta(0, arguments='"Paris"}'),
    Finished("tool_calls", Usage(9, 6)),
]


def as_sdk_message(events: list[Event]) -> Message:
    body = message_of("msg_1", "smol", assemble(events), finished_of(events), None)
    return Message.model_validate_json(msgspec.json.encode(body))


def test_a_text_answer_is_a_message_the_sdk_reads() -> None:
    message = as_sdk_message(TEXT)
    assert (message.id, message.type, message.role, message.model) == (
        "msg_1",
        "message",
        "assistant",
        "smol",
    )
    assert message.content[0].type == "text" and message.content[0].text == "Hello there"
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (7, 2)


def test_a_tool_call_is_a_tool_use_block() -> None:
    message = as_sdk_message(CALL)
    (block,) = message.content
    assert block.type == "tool_use" and block.id == "toolu_abc" and block.name == "get_weather"
    assert block.input == {"city": "Paris"} and message.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("finished", "reason", "sequence"),
    [
        (Finished("stop", Usage(1, 1)), "end_turn", None),
        (Finished("stop", Usage(1, 1), stop="END"), "stop_sequence", "END"),
        (Finished("length", Usage(1, 1)), "max_tokens", None),
        (Finished("tool_calls", Usage(1, 1)), "tool_use", None),
    ],
)
def test_stop_reasons(finished: Finished, reason: str, sequence: str | None) -> None:
    message = as_sdk_message([Started(), TextDelta("x"), finished])
    assert (message.stop_reason, message.stop_sequence) == (reason, sequence)


def streamed(events: list[Event]) -> list[dict[str, Any]]:
    writer = MessageEvents("msg_1", "smol", 5)
    out = writer.opening()
    for event in events:
        out += writer.finish(event) if isinstance(event, Finished) else writer.piece(event)
    parsed = []
    for frame in out.decode().strip().split("\n\n"):
        kind, data = frame.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        parsed.append(event)
    return parsed


def sdk_final(events: list[dict[str, Any]]) -> Message:
    """The message the SDK's ``messages.stream`` builds from these events (its own code)."""
    adapter = pydantic.TypeAdapter(RawMessageStreamEvent)
    snapshot = None
    json_bufs: dict[int, bytes] = {}
    for event in events:
        if event["type"] == "ping":
            continue
        snapshot = accumulate_event(
            event=adapter.validate_python(event), current_snapshot=snapshot, json_bufs=json_bufs
        )
    assert snapshot is not None
    return Message.model_validate(snapshot.model_dump())


def test_a_streamed_text_answer_is_anthropics_event_sequence() -> None:
    events = streamed(TEXT)
    assert [e["type"] for e in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0]["message"]["usage"] == {"input_tokens": 5, "output_tokens": 0}  # the estimate
    final = sdk_final(events)
    assert final.content[0].text == "Hello there" and final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (7, 2)  # the tier's count, at the end


def test_a_streamed_tool_call_is_a_tool_use_block_with_json_deltas() -> None:
    events = streamed([CALL[0], TextDelta("Sure."), *CALL[1:]])
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == ["text", "tool_use"]
    assert starts[1] == {"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {}}
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta" and e["index"] == 1]
    assert [d["type"] for d in deltas] == ["input_json_delta", "input_json_delta"]
    final = sdk_final(events)
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"} and final.stop_reason == "tool_use"


def test_a_degraded_stream_says_so_on_its_message_delta() -> None:
    writer = MessageEvents("msg_1", "smol", 5, degraded=("image",))
    ending = writer.finish(Finished("stop", Usage(3, 1))).decode()
    delta = json.loads(ending.split("event: message_delta\ndata: ")[1].split("\n")[0])
    assert delta["tiergate"] == {"degraded": ["image"]}


def test_an_empty_streamed_answer_is_one_empty_text_block() -> None:
    final = sdk_final(streamed([Started(), Finished("stop", Usage(3, 0))]))
    assert [(b.type, b.text) for b in final.content] == [("text", "")]


def test_an_error_mid_stream_is_an_error_event() -> None:
    frame = MessageEvents("msg_1", "smol", 5).failed(UpstreamFailed("the edge tier failed: boom"))
    assert frame.startswith(b"event: error\n")
    event = json.loads(frame.split(b"data: ")[1])
    assert event == {"type": "error", "error": {"type": "api_error", "message": "the edge tier failed: boom"}}


# -- errors and keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status", "kind", "sdk_error"),
    [
        (InvalidRequest("bad"), 400, "invalid_request_error", anthropic.BadRequestError),
        (AuthenticationFailed("invalid API key"), 401, "authentication_error", anthropic.AuthenticationError),
        (PermissionDenied("admin keys"), 403, "permission_error", anthropic.PermissionDeniedError),
        (ModelNotFound("no such model"), 404, "not_found_error", anthropic.NotFoundError),
        (RateLimited("slow down"), 429, "rate_limit_error", anthropic.RateLimitError),
        (ServiceUnavailable("starting"), 529, "overloaded_error", anthropic.OverloadedError),
        (GatewayError("internal"), 500, "api_error", anthropic.InternalServerError),
        (UpstreamFailed("the tier failed"), 502, "api_error", anthropic.InternalServerError),
    ],
)
def test_errors_in_anthropics_shape(
    error: GatewayError, status: int, kind: str, sdk_error: type[Exception]
) -> None:
    assert anthropic_status(error) == status
    assert anthropic_error_body(error) == {"type": "error", "error": {"type": kind, "message": error.message}}
    client = anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9")
    import httpx2

    response = httpx2.Response(
        status, json=anthropic_error_body(error), request=httpx2.Request("POST", "http://x")
    )
    made = client._make_status_error_from_response(response)
    assert isinstance(made, sdk_error)


def test_the_key_is_read_from_authorization_or_x_api_key() -> None:
    assert key_of({"authorization": "Bearer tg_a_b"}) == "tg_a_b"
    assert key_of({"x-api-key": "tg_a_b"}) == "tg_a_b"
    assert key_of({"authorization": "Basic xyz", "x-api-key": "tg_a_b"}) == ""  # one key, said one way
    assert key_of({}) == ""


# -- whatever is sent: a chat request, or a 400 --------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3000)
    | st.floats(-2, 3, allow_nan=False)
    | st.text(max_size=12)
)
_words = st.sampled_from(
    [
        "text",
        "image",
        "tool_use",
        "tool_result",
        "base64",
        "url",
        "auto",
        "any",
        "tool",
        "none",
        "user",
        "assistant",
        "get_weather",
        "toolu_1",
        "image/png",
        "ephemeral",
        "custom",
        "document",
        "enabled",
    ]
)
_keys = st.sampled_from(
    [
        "type",
        "text",
        "source",
        "media_type",
        "data",
        "url",
        "id",
        "name",
        "input",
        "tool_use_id",
        "content",
        "is_error",
        "cache_control",
        "role",
        "input_schema",
        "description",
        "disable_parallel_tool_use",
        "citations",
    ]
)
_values = st.recursive(
    _scalars | _words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.lists(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": _values}),
        max_size=3,
    ),
    extra=st.dictionaries(
        st.sampled_from(
            ["system", "tools", "tool_choice", "stop_sequences", "top_k", "metadata", "thinking", "stream"]
        ),
        _values,
        max_size=3,
    ),
)
def test_any_request_becomes_a_chat_request_or_a_400(
    messages: list[dict[str, Any]], extra: dict[str, Any]
) -> None:
    body = json.dumps({"model": "edge", "max_tokens": 8, "messages": messages, **extra}).encode()
    try:
        chat = chat_of(body)
    except InvalidRequest as exc:
        assert exc.status == 400 and exc.message
        assert anthropic_error_body(exc)["error"] == {"type": "invalid_request_error", "message": exc.message}
        return
    assert chat.messages and chat.max_tokens == 8
