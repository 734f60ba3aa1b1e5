"""The Messages API's field inventory (gateway/wire/anthropic/fields.py) against the installed ``anthropic``
SDK: every type and field its request types reach is listed, every honoured field is decoded, every
refused type or value gets the inventory's message in Anthropic's shape, and the blocks an answer's
``model_dump()`` gives (every field, None included) are taken back as sent."""

from __future__ import annotations

import collections.abc
import json
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
import typing_extensions
from anthropic.types import (
    DirectCaller,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    message_count_tokens_params,
    message_create_params,
)

from gateway.api.messages.checks import check_request
from gateway.api.messages.translate import chat_request
from gateway.errors import InvalidRequest, PermissionDenied, anthropic_error_body
from gateway.wire import messages as am
from gateway.wire.anthropic import fields as inv
from gateway.wire.fields import Honoured

ROOTS = (
    message_create_params.MessageCreateParamsNonStreaming,
    message_create_params.MessageCreateParamsStreaming,
    message_count_tokens_params.MessageCountTokensParams,
)
_WRAPPERS = {
    typing.Union,
    types.UnionType,
    typing.Annotated,
    typing_extensions.Required,
    typing_extensions.NotRequired,
    list,
    tuple,
    set,
    dict,
    collections.abc.Iterable,
    collections.abc.Sequence,
}
_LITERALS = {typing.Literal, typing_extensions.Literal}


def typeddicts_in(hint: Any) -> list[type]:
    """The TypedDicts a field's type names, through unions, lists, Iterable, Required, Annotated, ..."""
    if isinstance(hint, type) and typing_extensions.is_typeddict(hint):
        return [hint]
    origin = typing.get_origin(hint)
    if origin in _LITERALS or origin is None:
        return []
    return [found for arg in typing.get_args(hint) for found in typeddicts_in(arg)]


def literals_in(hint: Any) -> set[str]:
    if typing.get_origin(hint) in _LITERALS:
        return set(typing.get_args(hint))
    return {value for arg in typing.get_args(hint) for value in literals_in(arg)}


def walk() -> dict[str, dict[str, Any]]:
    """Every TypedDict the roots reach, by name, with its fields' types: a type the inventory refuses
    or takes whole is not walked into, nor is a refused field."""
    found: dict[str, dict[str, Any]] = {}
    todo = list(ROOTS)
    while todo:
        td = todo.pop()
        if td.__name__ in found:
            continue
        hints = typing.get_type_hints(td, include_extras=True)
        found[td.__name__] = hints
        entry = inv.TYPES.get(td.__name__)
        if not isinstance(entry, collections.abc.Mapping):
            continue
        for name, hint in hints.items():
            if isinstance(entry.get(name), Honoured):
                todo.extend(typeddicts_in(hint))
    return found


REACHED = walk()


def test_the_walk_reaches_the_blocks() -> None:  # the walk itself: it finds what it must
    assert {"ToolUseBlockParam", "ToolResultBlockParam", "ImageBlockParam", "ToolParam"} <= set(REACHED)
    assert len(REACHED) > 60, len(REACHED)


@pytest.mark.parametrize("name", sorted(REACHED))
def test_every_type_and_field_of_the_sdk_is_listed(name: str) -> None:
    entry = inv.TYPES.get(name)
    assert entry is not None, f"the installed anthropic SDK has {name}, which the inventory does not list"
    if isinstance(entry, collections.abc.Mapping):
        assert set(entry) == set(REACHED[name]), (
            f"{name}: listed {sorted(entry)}, SDK {sorted(REACHED[name])}"
        )
    elif isinstance(entry, inv.RefusedType) and entry.tags:
        assert set(entry.tags) == literals_in(REACHED[name]["type"]), name


def test_the_inventory_lists_nothing_the_sdk_lacks() -> None:
    assert set(inv.TYPES) - set(REACHED) == set()


# The wire shape of each type the inventory takes field by field.
SHAPES: dict[str, type[msgspec.Struct]] = {
    "MessageCreateParamsNonStreaming": am.CreateMessage,
    "MessageCreateParamsStreaming": am.CreateMessage,
    "MessageCountTokensParams": am.CountTokens,
    "UserMessageParam": am.MessageParam,
    "AssistantMessageParam": am.MessageParam,
    "SystemMessageParam": am.MessageParam,
    "TextBlockParam": am.TextBlock,
    "CacheControlEphemeralParam": am.CacheControl,
    "ImageBlockParam": am.ImageBlock,
    "ImageTransformationsParam": am.ImageTransformations,
    "Base64ImageSourceParam": am.Base64Source,
    "URLImageSourceParam": am.URLSource,
    "ToolUseBlockParam": am.ToolUseBlock,
    "DirectCallerParam": am.DirectCaller,
    "ToolResultBlockParam": am.ToolResultBlock,
    "MetadataParam": am.Metadata,
    "DiagnosticsParam": am.Diagnostics,
    "OutputConfigParam": am.OutputConfig,
    "JSONOutputFormatParam": am.JSONOutputFormat,
    "ThinkingConfigDisabledParam": am.Thinking,
    "ToolChoiceAutoParam": am.ToolChoiceAuto,
    "ToolChoiceAnyParam": am.ToolChoiceAny,
    "ToolChoiceToolParam": am.ToolChoiceTool,
    "ToolChoiceNoneParam": am.ToolChoiceNone,
    "ToolParam": am.Tool,
}
HEADERS = {"user_profile_id", "workspace_id"}  # the SDK sends them as headers


@pytest.mark.parametrize("name", [n for n, e in inv.TYPES.items() if isinstance(e, collections.abc.Mapping)])
def test_every_listed_field_is_decoded(name: str) -> None:
    shape = SHAPES[name]
    fields = {f.name for f in msgspec.structs.fields(shape)}
    if shape.__struct_config__.tag_field == "type":
        fields.add("type")
    entry = inv.TYPES[name]
    assert isinstance(entry, collections.abc.Mapping)
    assert set(entry) - HEADERS <= fields, set(entry) - HEADERS - fields


# -- refused: Anthropic's shape and the inventory's message ---------------------------------------

USER = {"role": "user", "content": "What is the weather in Paris?"}


def sent(**fields: Any) -> Any:
    """The chat request the endpoint makes of a create with ``fields`` (the tenant "default")."""
    body = {"model": "edge", "max_tokens": 16, "messages": [USER], **fields}
    request = am.parse_create(json.dumps(body).encode())
    check_request(request, "default", None)
    return chat_request(request)


def refusal_of(**fields: Any) -> str:
    with pytest.raises(InvalidRequest) as refused:
        sent(**fields)
    body = anthropic_error_body(refused.value)
    assert body["error"] == {"type": "invalid_request_error", "message": refused.value.message}
    return refused.value.message


BLOCKS = {  # a refused block's tag -> where it is sent
    tag: "assistant" if "tool_use" in tag or tag.endswith("_result") else "user"
    for tag in inv.DECODE_REFUSALS
    if not tag.startswith("code_execution_2") and tag != "file"
}


@pytest.mark.parametrize("tag", sorted(BLOCKS))
def test_a_refused_block_type_gets_the_inventorys_message(tag: str) -> None:
    turn = {"role": BLOCKS[tag], "content": [{"type": tag}]}
    message = refusal_of(messages=[USER, turn] if BLOCKS[tag] == "assistant" else [turn])
    at = "messages.1.content.0" if BLOCKS[tag] == "assistant" else "messages.0.content.0"
    assert message == f"{at}: " + inv.DECODE_REFUSALS[tag].format(model="edge", tag=tag)


def test_a_file_source_and_a_code_execution_caller_are_refused() -> None:
    image = {"type": "image", "source": {"type": "file", "file_id": "file_1"}}
    message = refusal_of(messages=[{"role": "user", "content": [image]}])
    assert message == "messages.0.content.0.image.source: " + inv.DECODE_REFUSALS["file"].format(model="edge")
    call = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "f",
        "input": {},
        "caller": {"type": "code_execution_20250825", "tool_id": "x"},
    }
    message = refusal_of(messages=[USER, {"role": "assistant", "content": [call]}])
    assert message.startswith("messages.1.content.0.tool_use.caller: code execution is not supported")


SERVER_TOOLS = sorted(
    tag
    for e in inv.TYPES.values()
    if isinstance(e, inv.RefusedType) and "tool types" in e.message
    for tag in e.tags
)


@pytest.mark.parametrize("tag", SERVER_TOOLS)
def test_a_server_tool_is_refused_as_anthropic_refuses_a_tool_type_the_model_lacks(tag: str) -> None:
    assert refusal_of(tools=[{"type": tag, "name": "x"}]) == f"'edge' does not support tool types: {tag}."


@pytest.mark.parametrize("kind", sorted(inv.THINKING))
def test_thinking_is_refused_as_anthropic_refuses_it_for_a_model_that_does_not_think(kind: str) -> None:
    assert refusal_of(thinking={"type": kind, "budget_tokens": 1024}) == inv.THINKING[kind]
    assert sent(thinking={"type": "disabled"}).messages  # disabled: taken


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"container": "c1"}, "container: containers are not supported on this model ('edge')."),
        ({"speed": "fast"}, "speed: fast mode is not supported on this model ('edge')."),
        ({"inference_geo": "us"}, "inference_geo: 'us' is not available here"),
        (
            {"tools": [{"name": "f", "input_schema": {"type": "object"}, "defer_loading": True}]},
            "tools.0.custom.defer_loading",
        ),
        (
            {
                "tools": [
                    {
                        "name": "f",
                        "input_schema": {"type": "object"},
                        "allowed_callers": ["code_execution_20250825"],
                    }
                ]
            },
            "tools.0.custom.allowed_callers: code execution",
        ),
        ({"bogus": 1}, "bogus: Extra inputs are not permitted"),
        (
            {"cache_control": {"type": "ephemeral", "scope": "x"}},
            "cache_control.ephemeral.scope: Extra inputs are not permitted",
        ),
    ],
)
def test_a_refused_value_or_unknown_field_is_anthropics_400(fields: dict[str, Any], said: str) -> None:
    assert refusal_of(**fields).startswith(said)


def test_null_container_and_global_geo_and_standard_speed_are_taken() -> None:
    assert sent(container=None, inference_geo="global", speed="standard").messages


def test_the_profile_header_is_the_end_user_unless_metadata_names_one() -> None:
    body = {"model": "edge", "max_tokens": 4, "messages": [USER]}
    assert chat_request(am.parse_create(json.dumps(body).encode()), "profile-1").user == "profile-1"
    named = {**body, "metadata": {"user_id": "u-7"}}
    assert chat_request(am.parse_create(json.dumps(named).encode()), "profile-1").user == "u-7"


def test_a_foreign_workspace_is_403_and_the_tenants_own_is_taken() -> None:
    request = am.parse_create(json.dumps({"model": "edge", "max_tokens": 4, "messages": [USER]}).encode())
    check_request(request, "acme", "acme")
    with pytest.raises(PermissionDenied):
        check_request(request, "acme", "wrkspc_other")


# -- an answer's blocks, passed back ------------------------------------------------------------------


def answer_blocks() -> list[dict[str, Any]]:
    """An assistant turn as the SDK's response models dump it: every field, None included."""
    return [
        ThinkingBlock(type="thinking", thinking="Let me see.", signature="sig").model_dump(),
        RedactedThinkingBlock(type="redacted_thinking", data="xyz").model_dump(),
        TextBlock(type="text", text="I will look it up.").model_dump(),
        ToolUseBlock(
            type="tool_use", id="toolu_01", name="get_weather", input={"city": "Paris"}
        ).model_dump(),
        ToolUseBlock(
            type="tool_use",
            id="toolu_02",
            name="get_weather",
            input={"city": "Rome"},
            caller=DirectCaller(type="direct"),
        ).model_dump(),
    ]


def test_model_dump_blocks_are_taken_back_as_sent() -> None:
    blocks = answer_blocks()
    assert (
        blocks[3]["caller"] is None and blocks[3]["toolset_name"] is None and blocks[2]["citations"] is None
    )
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny", "toolset_name": None},
        {"type": "tool_result", "tool_use_id": "toolu_02", "content": [{"type": "text", "text": "rain"}]},
    ]
    chat = sent(
        messages=[USER, {"role": "assistant", "content": blocks}, {"role": "user", "content": results}]
    )
    assistant = chat.messages[1]
    assert assistant.content == "I will look it up."  # the thinking is left out
    assert [c.id for c in assistant.tool_calls] == ["toolu_01", "toolu_02"]
    assert [(m.role, m.content) for m in chat.messages[2:]] == [("tool", "sunny"), ("tool", "rain")]


def test_a_toolset_members_block_is_refused() -> None:
    block = ToolUseBlock(
        type="tool_use", id="toolu_1", name="f", input={}, toolset_name="browser"
    ).model_dump()
    message = refusal_of(messages=[USER, {"role": "assistant", "content": [block]}])
    assert (
        message
        == "messages.1.content.0.tool_use.toolset_name: toolsets are not supported on this model ('edge')."
    )


def test_a_system_turn_and_output_config_and_examples_are_honoured() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    chat = sent(
        messages=[{"role": "system", "content": "Be brief."}, USER],
        output_config={"effort": "low", "format": {"type": "json_schema", "schema": schema}},
        tools=[
            {
                "name": "f",
                "input_schema": schema,
                "input_examples": [{"city": "Oslo"}],
                "eager_input_streaming": True,
            }
        ],
    )
    assert (chat.messages[0].role, chat.messages[0].content) == ("system", "Be brief.")
    assert chat.response_format.json_schema.schema == schema and chat.reasoning_effort == "low"
    assert '{"city":"Oslo"}' in chat.tools[0].function.description


def test_docs_api_md_shows_the_inventory_as_it_is() -> None:
    docs = Path(__file__).parents[3] / "docs" / "api.md"
    assert inv.table().rstrip() in docs.read_text(), "run: python -m gateway.wire.anthropic.fields"


@pytest.mark.parametrize(
    ("model", "shape"),
    [
        (TextBlock, am.TextBlock),
        (ToolUseBlock, am.ToolUseBlock),
        (ThinkingBlock, am.ThinkingBlock),
        (RedactedThinkingBlock, am.RedactedThinkingBlock),
    ],
)
def test_every_field_an_answers_block_dumps_is_a_field_here(model: Any, shape: type[msgspec.Struct]) -> None:
    """The blocks an answer's ``model_dump()`` gives: a field the SDK's response model gains (as
    ``toolset_name`` came) fails here before a client's round trip does."""
    assert set(model.model_fields) - {"type"} <= {f.name for f in msgspec.structs.fields(shape)}
