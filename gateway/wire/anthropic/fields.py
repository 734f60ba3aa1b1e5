"""Every request type and field of Anthropic's Messages API as the ``anthropic`` SDK has them, and what
tiergate does with each: the counterpart of :mod:`gateway.wire.fields` (OpenAI's spec).

One entry per ``TypedDict`` reachable from ``MessageCreateParams`` (streaming or not) and
``MessageCountTokensParams``, by its SDK name:

- a mapping of its fields, each :class:`Honoured` (and how) or :class:`Refused` (Anthropic's 400
  ``invalid_request_error`` with this message, ``<path>: `` in front);
- :class:`Whole`: the type is taken as sent, all its fields (a citation sent back, a JSON schema);
- :class:`RefusedType`: a block, source, caller or tool of this ``type`` is refused whole, with
  Anthropic's message for a model that lacks it (its fields are then not listed).

``tests/gateway/wire/test_anthropic_fields.py`` walks the installed SDK's types (through unions,
lists, ``Iterable``, ``Required``, ``Annotated``) and fails when one has a type or field this inventory
does not list.  ``python -m gateway.wire.anthropic.fields`` prints the table of docs/api.md.

``cache_control`` (on a block, a tool or the request) reaches a provider tier of protocol ``anthropic``
where it was (gateway/api/messages/caching.py), whose cache reads and writes are billed at their
prices; on the other tiers it changes nothing: the engines' prefix caches (vLLM's, llama.cpp's slots)
keep every prompt's prefix without breakpoints, and the usage says no cache tokens — which is what
Anthropic itself does for a prompt too short to cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.wire.fields import Honoured, Refused


@dataclass(frozen=True, slots=True)
class Whole:
    how: str


@dataclass(frozen=True, slots=True)
class RefusedType:
    """Refused whole by its ``type`` (``tags``); ``{model}`` in the message is the request's model."""

    tags: tuple[str, ...]
    message: str


Entry = Mapping[str, Honoured | Refused] | Whole | RefusedType

CACHE = Honoured(
    "sent on to Anthropic provider tiers; elsewhere no effect (see the module's note: no cache tokens, "
    "as Anthropic for an uncacheable prompt)"
)
AS_CHAT = "as the chat request's field of that name"


def _server_tool(*tags: str) -> RefusedType:
    # Anthropic's wording for a tool type the model at hand does not run.
    return RefusedType(tags, "'{model}' does not support tool types: {tag}.")


def _block(tag: str, what: str) -> RefusedType:
    return RefusedType((tag,), f"{what} are not supported on this model ('{{model}}').")


_PROMPT: Mapping[str, Honoured | Refused] = {
    "model": Honoured("`tiergate-auto` (the router chooses), a tier's name, or an alias"),
    "messages": Honoured("the conversation: user, assistant and system turns"),
    "system": Honoured("the system message in front (text blocks joined by newlines)"),
    "tools": Honoured("client tools (`custom`) as function tools; server tools are refused by type"),
    "tool_choice": Honoured("auto → auto, any → required, tool → that function, none → none"),
    "thinking": Honoured(
        "`disabled`; the other types are refused as Anthropic refuses them for a model that does not think"
    ),
    "cache_control": CACHE,
    "output_config": Honoured(
        "`format` as constrained decoding (a JSON schema); `effort` as chat's `reasoning_effort`"
    ),
    "speed": Honoured("`standard`; `fast` is refused (one speed here)"),
    "user_profile_id": Honoured(
        "a header (`anthropic-user-profile-id`): the end user, as `metadata.user_id` (which wins when "
        "both are sent)"
    ),
    "workspace_id": Honoured(
        "a header (`anthropic-workspace-id`): a key here belongs to one tenant, as a Workspace's key to its "
        "Workspace; taken when it names the key's tenant, else 403 as Anthropic answers a foreign Workspace"
    ),
}

REQUEST: Mapping[str, Honoured | Refused] = {
    **_PROMPT,
    "max_tokens": Honoured("the answer's token limit"),
    "stream": Honoured("Anthropic's server-sent events"),
    "stop_sequences": Honoured("up to 16 stop sequences, applied by the engine"),
    "metadata": Honoured("`user_id`: the end user (chat's `user`)"),
    "service_tier": Honoured("validated; one service tier here"),
    "container": Refused("containers are not supported on this model ('{model}')."),
    "diagnostics": Honoured(
        "the answer carries `diagnostics.cache_miss_reason` `unavailable` (Anthropic's reason when it cannot "
        "diagnose): no prompt cache here keeps a previous request's fingerprint"
    ),
    "inference_geo": Honoured(
        "`global` (where this gateway runs is its operator's); another region is refused"
    ),
}

# Sent by older SDKs and still taken by Anthropic's API; the 2.x SDK's types no longer have them.
API_ONLY: Mapping[str, Honoured] = {
    "temperature": Honoured("sent to the tier's engine as its sampling parameter"),
    "top_p": Honoured("sent to the tier's engine as its sampling parameter"),
    "top_k": Honoured("sent to the tier's engine as its sampling parameter"),
}

COUNT: Mapping[str, Honoured | Refused] = _PROMPT

TOOL_USE: Mapping[str, Honoured | Refused] = {
    "id": Honoured("the call's id (a `tool_result` names it)"),
    "name": Honoured("the function called"),
    "input": Honoured("its arguments (as JSON text for the tier)"),
    "type": Honoured("`tool_use`"),
    "cache_control": CACHE,
    "caller": Honoured("`direct` (or null, as `model_dump()` gives it); a code-execution caller is refused"),
    "toolset_name": Honoured(
        "null (as `model_dump()` gives it); a toolset member is refused: no toolsets here"
    ),
}

TYPES: Mapping[str, Entry] = {
    "MessageCreateParamsNonStreaming": REQUEST,
    "MessageCreateParamsStreaming": REQUEST,
    "MessageCountTokensParams": COUNT,
    "UserMessageParam": {"role": Honoured("`user`"), "content": Honoured("a string or blocks")},
    "AssistantMessageParam": {"role": Honoured("`assistant`"), "content": Honoured("a string or blocks")},
    "SystemMessageParam": {
        "role": Honoured("`system`: a system message where it stands in the conversation"),
        "content": Honoured("a string or text blocks"),
    },
    "TextBlockParam": {
        "type": Honoured("`text`"),
        "text": Honoured("a text part (an assistant's: its content)"),
        "cache_control": CACHE,
        "citations": Honoured(
            "an earlier answer's citations, sent back with it: accepted, not part of the prompt"
        ),
    },
    "CacheControlEphemeralParam": {
        "type": Honoured("`ephemeral`"),
        "ttl": Honoured("`5m` or `1h`: validated"),
    },
    **{
        name: Whole("a citation sent back with its text block (its fields as Anthropic gave them)")
        for name in (
            "CitationCharLocationParam",
            "CitationPageLocationParam",
            "CitationContentBlockLocationParam",
            "CitationWebSearchResultLocationParam",
            "CitationSearchResultLocationParam",
        )
    },
    "ImageBlockParam": {
        "type": Honoured("`image`: an image part"),
        "source": Honoured("`base64` (a `data:` URI) or `url` (fetched behind the SSRF guard)"),
        "cache_control": CACHE,
        "transformations": Honoured(
            "`oversized_image`: `downsize` (what the media pipeline does); `error` is refused"
        ),
    },
    "ImageTransformationsParam": {"oversized_image": Honoured("`downsize`; `error` is refused")},
    "Base64ImageSourceParam": {
        "type": Honoured("`base64`"),
        "media_type": Honoured("JPEG, PNG, GIF or WebP"),
        "data": Honoured("the image, base64"),
    },
    "URLImageSourceParam": {"type": Honoured("`url`"), "url": Honoured("the image's URL")},
    "FileImageSourceParam": RefusedType(
        ("file",), "file sources are not supported on this model ('{model}'): no Files API here."
    ),
    "DocumentBlockParam": _block("document", "document blocks (PDF and text documents)"),
    "SearchResultBlockParam": _block("search_result", "search_result blocks"),
    "ThinkingBlockParam": Whole(
        "accepted in an assistant turn and left out of the prompt, as Anthropic leaves an earlier turn's "
        "thinking out"
    ),
    "RedactedThinkingBlockParam": Whole("as `thinking`: accepted and left out of the prompt"),
    "ToolUseBlockParam": TOOL_USE,
    "DirectCallerParam": {"type": Honoured("`direct`")},
    "ServerToolCallerParam": RefusedType(
        ("code_execution_20250825",), "code execution is not supported on this model ('{model}')."
    ),
    "ServerToolCaller20260120Param": RefusedType(
        ("code_execution_20260120",), "code execution is not supported on this model ('{model}')."
    ),
    "ToolResultBlockParam": {
        "type": Honoured("`tool_result`: a `tool` message"),
        "tool_use_id": Honoured("the call it answers"),
        "content": Honoured("a string, or text and image blocks (the images follow as a user turn)"),
        "is_error": Honoured("`Error: ` in front of the text"),
        "cache_control": CACHE,
        "toolset_name": TOOL_USE["toolset_name"],
    },
    "ToolReferenceBlockParam": _block("tool_reference", "tool_reference blocks (tool search)"),
    "BrowserStateBlockParam": _block("browser_state", "browser_state blocks"),
    "ServerToolUseBlockParam": _block("server_tool_use", "server_tool_use blocks"),
    "WebSearchToolResultBlockParam": _block("web_search_tool_result", "web_search_tool_result blocks"),
    "WebFetchToolResultBlockParam": _block("web_fetch_tool_result", "web_fetch_tool_result blocks"),
    "CodeExecutionToolResultBlockParam": _block(
        "code_execution_tool_result", "code_execution_tool_result blocks"
    ),
    "BashCodeExecutionToolResultBlockParam": _block(
        "bash_code_execution_tool_result", "bash_code_execution_tool_result blocks"
    ),
    "TextEditorCodeExecutionToolResultBlockParam": _block(
        "text_editor_code_execution_tool_result", "text_editor_code_execution_tool_result blocks"
    ),
    "ToolSearchToolResultBlockParam": _block("tool_search_tool_result", "tool_search_tool_result blocks"),
    "ContainerUploadBlockParam": _block("container_upload", "container_upload blocks"),
    "MetadataParam": {"user_id": Honoured("the end user (chat's `user`, ≤ 256 characters)")},
    "DiagnosticsParam": {"previous_message_id": Honoured("validated (≤ 256 characters)")},
    "OutputConfigParam": {
        "format": Honoured("`json_schema`: the answer's text is constrained to the schema"),
        "effort": Honoured(
            "chat's `reasoning_effort` (passed to the cloud tier's vLLM); the models here do not reason, so "
            "every effort answers alike"
        ),
    },
    "JSONOutputFormatParam": {"type": Honoured("`json_schema`"), "schema": Honoured("the JSON schema")},
    "ThinkingConfigDisabledParam": {"type": Honoured("`disabled`")},
    "ThinkingConfigEnabledParam": RefusedType(
        ("enabled",), '"thinking.type.enabled" is not supported for this model'
    ),
    "ThinkingConfigAdaptiveParam": RefusedType(
        ("adaptive",), "adaptive thinking is not supported on this model"
    ),
    "ThinkingConfigBetweenToolsParam": RefusedType(
        ("between_tools",), '"thinking.type.between_tools" is not supported for this model'
    ),
    "ToolChoiceAutoParam": {
        "type": Honoured("`auto`"),
        "disable_parallel_tool_use": Honoured("`parallel_tool_calls: false`"),
    },
    "ToolChoiceAnyParam": {
        "type": Honoured("`any` (required)"),
        "disable_parallel_tool_use": Honoured("`parallel_tool_calls: false`"),
    },
    "ToolChoiceToolParam": {
        "type": Honoured("`tool`"),
        "name": Honoured("the function required"),
        "disable_parallel_tool_use": Honoured("`parallel_tool_calls: false`"),
    },
    "ToolChoiceNoneParam": {"type": Honoured("`none`")},
    "ToolParam": {
        "type": Honoured("`custom` (or left out)"),
        "name": Honoured("the function's name"),
        "description": Honoured("the function's description"),
        "input_schema": Honoured("the function's parameters (a JSON schema)"),
        "strict": Honoured("the arguments constrained to the schema"),
        "cache_control": CACHE,
        "allowed_callers": Honoured("`direct`; code-execution callers are refused"),
        "defer_loading": Honoured("`false`; `true` (loaded by tool search) is refused: no tool search here"),
        "eager_input_streaming": Honoured("accepted: the input streams as the tier writes it, in any case"),
        "input_examples": Honoured("appended to the function's description as examples of its input"),
    },
    "InputSchemaTyped": Whole("the JSON schema, passed to the tier as the function's parameters"),
    **{
        name: _server_tool(*tags)
        for name, tags in {
            "ToolBash20250124Param": ("bash_20250124",),
            "CodeExecutionTool20250522Param": ("code_execution_20250522",),
            "CodeExecutionTool20250825Param": ("code_execution_20250825",),
            "CodeExecutionTool20260120Param": ("code_execution_20260120",),
            "CodeExecutionTool20260521Param": ("code_execution_20260521",),
            "BrowserToolset20260801Param": ("browser_toolset_20260801",),
            "ComputerToolset20260801Param": ("computer_toolset_20260801",),
            "MemoryTool20250818Param": ("memory_20250818",),
            "ToolTextEditor20250124Param": ("text_editor_20250124",),
            "ToolTextEditor20250429Param": ("text_editor_20250429",),
            "ToolTextEditor20250728Param": ("text_editor_20250728",),
            "WebSearchTool20250305Param": ("web_search_20250305",),
            "WebSearchTool20260209Param": ("web_search_20260209",),
            "WebSearchTool20260318Param": ("web_search_20260318",),
            "WebFetchTool20250910Param": ("web_fetch_20250910",),
            "WebFetchTool20260209Param": ("web_fetch_20260209",),
            "WebFetchTool20260309Param": ("web_fetch_20260309",),
            "WebFetchTool20260318Param": ("web_fetch_20260318",),
            "ToolSearchToolBm25_20251119Param": ("tool_search_tool_bm25_20251119", "tool_search_tool_bm25"),
            "ToolSearchToolRegex20251119Param": ("tool_search_tool_regex_20251119", "tool_search_tool_regex"),
        }.items()
    },
}

# The blocks, sources and callers refused by their ``type`` as the body is decoded: tag → message.
DECODE_REFUSALS: Mapping[str, str] = {
    tag: entry.message
    for name, entry in TYPES.items()
    if isinstance(entry, RefusedType) and (name.endswith(("BlockParam", "SourceParam")) or "Caller" in name)
    for tag in entry.tags
}
THINKING: Mapping[str, str] = {
    tag: entry.message
    for name, entry in TYPES.items()
    if isinstance(entry, RefusedType) and name.startswith("ThinkingConfig")
    for tag in entry.tags
}


def refusal(entry: Honoured | Refused, model: str) -> str:
    assert isinstance(entry, Refused)
    return entry.message.format(model=model)


def table() -> str:
    """The inventory as Markdown, for docs/api.md."""
    lines = ["| type | field | here |", "|---|---|---|"]
    for name, entry in TYPES.items():
        if isinstance(entry, Whole):
            lines.append(f"| `{name}` | (all) | {entry.how} |")
        elif isinstance(entry, RefusedType):
            tags = ", ".join(f"`{t}`" for t in entry.tags) or "(any)"
            lines.append(f"| `{name}` | type {tags} | refused: 400, “{entry.message}” |")
        else:
            for field, verdict in entry.items():
                how = verdict.how if isinstance(verdict, Honoured) else f"refused: 400, “{verdict.message}”"
                lines.append(f"| `{name}` | `{field}` | {how} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
