"""An Anthropic Messages request as the chat request the pipeline's stages take, and an answer's
events as Anthropic's ``message``.

    system (a string, or text blocks)    the system message in front (blocks joined by newlines); a
                                         ``system`` turn: a system message where it stands
    text block                           a text part (an assistant's text: its content)
    image block, base64 or url source    an image part (``data:`` URI, or the URL, fetched behind
                                         the SSRF guard as any image URL is)
    tool_use block (assistant)           a tool call, its ``input`` as the arguments' JSON text
    tool_result block (user)             a ``tool`` message (its text; ``is_error`` says "Error: "
                                         in front); its images follow in a user message
    thinking, redacted_thinking          left out (an earlier turn's thinking, as Anthropic does)
    tools, tool_choice                   function tools; auto → auto, any → required, tool → that
                                         function, none → none; disable_parallel_tool_use → false
                                         parallel_tool_calls
    stop_sequences, temperature, top_p,  stop, temperature, top_p, top_k, max_tokens, user
    top_k, max_tokens, metadata.user_id  (else the ``anthropic-user-profile-id`` header)
    output_config                        format → response_format json_schema (strict); effort →
                                         reasoning_effort
    tool input_examples                  appended to the function's description

What the inventory refuses by value is refused first (gateway/api/messages/checks.py).  The
mapping tables (stop reasons, tool_choice, image sources, tool ids) are the provider tier's
(tiers/cloud/provider/anthropic/_tables.py): one pair of translators for both ways.

Back: the text as a ``text`` block, each tool call as a ``tool_use`` block (its id ``toolu_…``, its
arguments parsed into ``input``), finish_reason as ``stop_reason`` (stop → end_turn, or
stop_sequence when a stop sequence ended it; length → max_tokens; tool_calls → tool_use).
"""

from __future__ import annotations

import secrets
from typing import Any, cast

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire import messages as am
from gateway.wire.chat import (
    CalledFunction,
    ChatCompletionRequest,
    ChosenFunction,
    ContentPart,
    FunctionDef,
    ImagePart,
    ImageURL,
    JsonSchemaFormat,
    JsonSchemaSpec,
    Message,
    NamedToolChoice,
    TextPart,
    Tool,
    ToolCallIn,
    check_chat_request,
)
from tiers import Completion, Event, Finished
from tiers.cloud.provider.anthropic import (
    image_url,
    neutral_tool_choice,
    stop_reason,
    tool_input,
    tool_use_block,
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _image(block: am.ImageBlock) -> ImagePart:
    return ImagePart(ImageURL(image_url(msgspec.to_builtins(block.source))))


def _text_of(content: str | list[am.TextBlock]) -> str:
    return content if isinstance(content, str) else "\n".join(b.text for b in content)


def _result(block: am.ToolResultBlock) -> tuple[Message, list[ContentPart]]:
    """A tool result as a ``tool`` message, and its images (a tool message carries text only)."""
    if isinstance(block.content, str):
        text, images = block.content, []
    else:
        text = "\n".join(b.text for b in block.content if isinstance(b, am.TextBlock))
        images = [_image(b) for b in block.content if isinstance(b, am.ImageBlock)]
    if block.is_error:
        text = f"Error: {text}"
    return Message(role="tool", content=text, tool_call_id=block.tool_use_id), list(images)


def _user(message: am.MessageParam, where: str) -> list[Message]:
    if isinstance(message.content, str):
        return [Message(role="user", content=message.content)]
    results: list[Message] = []
    parts: list[ContentPart] = []
    for i, block in enumerate(message.content):
        if isinstance(block, am.ToolResultBlock):
            result, images = _result(block)
            results.append(result)
            parts.extend(images)
        elif isinstance(block, am.TextBlock):
            parts.append(TextPart(block.text))
        elif isinstance(block, am.ImageBlock):
            parts.append(_image(block))
        else:
            raise InvalidRequest(
                f"{where}.content.{i}: a {block.__struct_config__.tag} block belongs in an assistant message",
                param=f"{where}.content.{i}",
            )
    return [*results, *([Message(role="user", content=parts)] if parts else [])]


def _system(message: am.MessageParam, where: str) -> Message:
    if isinstance(message.content, list) and not all(isinstance(b, am.TextBlock) for b in message.content):
        raise InvalidRequest(
            f"{where}.content: a system turn takes text blocks only", param=f"{where}.content"
        )
    return Message(role="system", content=_text_of(message.content))  # type: ignore[arg-type]


def _assistant(message: am.MessageParam, where: str) -> Message:
    if isinstance(message.content, str):
        return Message(role="assistant", content=message.content)
    text: list[str] = []
    calls: list[ToolCallIn] = []
    for i, block in enumerate(message.content):
        if isinstance(block, am.ThinkingBlock | am.RedactedThinkingBlock):
            continue  # an earlier turn's thinking: out of the prompt, as Anthropic leaves it out
        if isinstance(block, am.TextBlock):
            text.append(block.text)
        elif isinstance(block, am.ToolUseBlock):
            arguments = msgspec.json.encode(block.input).decode()
            calls.append(ToolCallIn(id=block.id, function=CalledFunction(block.name, arguments)))
        else:
            kind = "an image" if isinstance(block, am.ImageBlock) else "a tool_result"
            raise InvalidRequest(
                f"{where}.content.{i}: {kind} block belongs in a user message", param=f"{where}.content.{i}"
            )
    joined = "".join(text)
    return Message(
        role="assistant", content=joined if joined or not calls else None, tool_calls=calls or None
    )


def messages_of(request: am.CreateMessage | am.CountTokens) -> list[Message]:
    """The chat messages of a request: its system text in front, then each turn's."""
    messages: list[Message] = []
    if request.system is not None and (system := _text_of(request.system)):
        messages.append(Message(role="system", content=system))
    for i, message in enumerate(request.messages):
        where = f"messages.{i}"
        if message.role == "user":
            messages.extend(_user(message, where))
        elif message.role == "system":
            messages.append(_system(message, where))
        else:
            messages.append(_assistant(message, where))
    return messages


def _tool(tool: am.Tool, i: int) -> Tool:
    """A client tool as a function (server tools were refused by checks.py)."""
    if tool.input_schema is None:
        raise InvalidRequest(
            f"tools.{i}.custom.input_schema: Field required", param=f"tools.{i}.input_schema"
        )
    description = tool.description
    if tool.input_examples:
        examples = "\n".join(msgspec.json.encode(e).decode() for e in tool.input_examples)
        description = f"{description or ''}\n\nExamples of input:\n{examples}".strip()
    return Tool(FunctionDef(tool.name, description, tool.input_schema, tool.strict))


def _tools(request: am.CreateMessage | am.CountTokens) -> dict[str, Any]:
    """The chat request's tools, tool_choice and parallel_tool_calls."""
    tools = [_tool(t, i) for i, t in enumerate(request.tools or ())]
    choice = request.tool_choice
    fields: dict[str, Any] = {"tools": tools or None}
    if choice is None or (not tools and isinstance(choice, am.ToolChoiceAuto | am.ToolChoiceNone)):
        return fields  # Anthropic takes auto or none without tools: nothing to choose from
    neutral, parallel = neutral_tool_choice(msgspec.to_builtins(choice))
    fields["tool_choice"] = (
        NamedToolChoice(ChosenFunction(neutral["function"]["name"])) if isinstance(neutral, dict) else neutral
    )
    if parallel is not None:
        fields["parallel_tool_calls"] = parallel
    return fields


def _output(config: am.OutputConfig | None) -> dict[str, Any]:
    if config is None:
        return {}
    fields: dict[str, Any] = {}
    if config.format is not None:
        spec = JsonSchemaSpec(name="output", schema=config.format.schema, strict=True)
        fields["response_format"] = JsonSchemaFormat(spec)
    if config.effort is not None:
        fields["reasoning_effort"] = config.effort  # the same five words as chat's
    return fields


def chat_request(
    request: am.CreateMessage | am.CountTokens, profile: str | None = None
) -> ChatCompletionRequest:
    """The chat request for ``request`` (a token count: its prompt alone), checked as a chat request is;
    ``profile``: the ``anthropic-user-profile-id`` header (the end user when metadata names none)."""
    fields = _tools(request) | _output(request.output_config)
    if isinstance(request, am.CreateMessage):
        user = request.metadata.user_id if request.metadata is not None else None
        fields |= {
            "stream": request.stream,
            "max_tokens": request.max_tokens,
            "stop": request.stop_sequences,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "top_k": request.top_k,
            "user": user if user is not None else (profile[:256] if profile else None),
        }
    chat = ChatCompletionRequest(model=request.model, messages=messages_of(request), **fields)
    if not chat.messages:
        raise InvalidRequest("the conversation is empty", param="messages")
    check_chat_request(chat)
    return chat


# -- the answer ------------------------------------------------------------------------------------


def stop_of(reason: str, stop: str) -> tuple[am.StopReason, str | None]:
    """Anthropic's stop_reason and stop_sequence for a tier's finish_reason and the stop sequence that
    ended the answer (empty when none did): the shared table's."""
    found, sequence = stop_reason(reason, stop)
    return cast(am.StopReason, found), sequence


def finished_of(events: list[Event]) -> Finished | None:
    return next((e for e in reversed(events) if isinstance(e, Finished)), None)


def message_of(
    message_id: str,
    model: str,
    answer: Completion,
    finished: Finished | None,
    info: am.TiergateInfo | None,
    diagnosed: bool = False,
) -> am.MessageOut:
    """``diagnosed``: the request asked for ``diagnostics`` (its answer: Anthropic's ``unavailable``)."""
    choice = answer.choices[0]
    content: list[am.TextOut | am.ToolUseOut] = []
    if choice.text or not choice.tool_calls:
        content.append(am.TextOut(choice.text))
    for call in choice.tool_calls:
        block = tool_use_block(call.id, call.name, tool_input(call.arguments))
        content.append(am.ToolUseOut(block["id"], block["name"], block["input"]))
    reason, sequence = stop_of(choice.finish_reason, finished.stop if finished is not None else "")
    usage = am.UsageOut.of(answer.usage)
    return am.MessageOut(
        id=message_id,
        model=model,
        content=content,
        stop_reason=reason,
        stop_sequence=sequence,
        usage=usage,
        role="assistant",
        tiergate=info if info is not None else msgspec.UNSET,
        diagnostics=am.DiagnosticsOut(am.CacheMissReason()) if diagnosed else msgspec.UNSET,
    )
