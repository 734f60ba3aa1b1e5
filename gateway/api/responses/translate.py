"""A Responses API request as the chat request the pipeline's stages take, and an answer's output
as the conversation a later request continues.

Input items become chat messages: a message item one message (``input_text`` → text,
``input_image`` → an image part, an earlier ``output_text`` → assistant text), a run of
``function_call`` items one assistant message with those ``tool_calls`` (joined to the assistant
text just before them), a ``function_call_output`` a ``tool`` message.  ``instructions`` are the
system message in front, and are not carried to the next response (OpenAI's rule).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire import responses as rp
from gateway.wire.chat import (
    CalledFunction,
    ChatCompletionRequest,
    ChosenFunction,
    ContentPart,
    FunctionDef,
    ImagePart,
    ImageURL,
    JsonObjectFormat,
    JsonSchemaFormat,
    JsonSchemaSpec,
    Message,
    NamedToolChoice,
    ResponseFormat,
    StreamOptions,
    TextPart,
    Tool,
    ToolCallIn,
    check_chat_request,
)
from tiers import Completion

ToolMode = Literal["none", "auto", "required"]
MAX_MESSAGES = 4096  # as a chat request's


def messages_of(items: list[rp.Item]) -> list[Message]:
    messages: list[Message] = []
    for item in items:
        if isinstance(item, rp.MessageItem):
            messages.append(_message(item))
        elif isinstance(item, rp.FunctionCallItem):
            call = ToolCallIn(id=item.call_id, function=CalledFunction(item.name, item.arguments))
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and not _ends_in_results(messages):
                last.tool_calls = [*(last.tool_calls or ()), call]
            else:
                messages.append(Message(role="assistant", tool_calls=[call]))
        else:
            output = item.output if isinstance(item.output, str) else "".join(p.text for p in item.output)
            messages.append(Message(role="tool", content=output, tool_call_id=item.call_id))
    return messages


def _ends_in_results(messages: list[Message]) -> bool:
    return bool(messages) and messages[-1].role == "tool"


def _message(item: rp.MessageItem) -> Message:
    if isinstance(item.content, str):
        return Message(role=item.role, content=item.content)
    parts: list[ContentPart] = []
    refusal = None
    for part in item.content:
        if isinstance(part, rp.InputText | rp.OutputText):
            parts.append(TextPart(part.text))
        elif isinstance(part, rp.InputImage):
            assert part.image_url is not None  # checked at parse time
            parts.append(ImagePart(ImageURL(part.image_url, part.detail)))
        else:
            refusal = part.refusal
    if item.role == "assistant":  # chat assistant turns carry text only
        text = "".join(p.text for p in parts if isinstance(p, TextPart))
        return Message(role="assistant", content=text or None, refusal=refusal)
    return Message(role=item.role, content=parts)


def _format(request: rp.ResponsesRequest) -> ResponseFormat | None:
    fmt = request.format
    if isinstance(fmt, rp.JsonSchemaFormat):
        spec = JsonSchemaSpec(fmt.name, fmt.description, fmt.schema, fmt.strict)
        return JsonSchemaFormat(spec)
    if isinstance(fmt, rp.JsonObjectFormat):
        return JsonObjectFormat()
    return None


def _tool_choice(choice: rp.ResponsesRequest) -> ToolMode | NamedToolChoice | None:
    picked = choice.tool_choice
    if isinstance(picked, rp.ChosenFunction):
        return NamedToolChoice(ChosenFunction(picked.name))
    return picked


def chat_request(
    request: rp.ResponsesRequest, tools: list[rp.FunctionTool], thread: list[Message], continued: bool
) -> ChatCompletionRequest:
    """The chat request for ``request``: its instructions, then ``thread`` (the stored conversation
    it continues, when ``continued``, and its own input); checked as a chat request is."""
    messages = list(thread)
    if request.instructions is not None:
        messages.insert(0, Message(role="system", content=request.instructions))
    if not messages:
        raise InvalidRequest("the conversation is empty", param="input")
    if len(messages) > MAX_MESSAGES:
        raise InvalidRequest(
            f"the conversation has {len(messages)} messages, over {MAX_MESSAGES}; start a new one",
            param="previous_response_id" if continued else "input",
        )
    chat = ChatCompletionRequest(
        model=request.model,
        messages=messages,
        stream=request.stream,
        max_completion_tokens=request.max_output_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        logprobs=request.logprobs or None,
        top_logprobs=request.top_logprobs if request.logprobs else None,
        tools=[Tool(FunctionDef(t.name, t.description, t.parameters, t.strict)) for t in tools] or None,
        tool_choice=_tool_choice(request),
        parallel_tool_calls=request.parallel_tool_calls,
        response_format=_format(request),
        metadata=request.metadata,
        user=request.user,
        service_tier=request.service_tier,
        safety_identifier=request.safety_identifier,
        prompt_cache_key=request.prompt_cache_key,
        reasoning_effort=request.reasoning.effort if request.reasoning else None,
        stream_options=StreamOptions(include_obfuscation=True) if _obfuscated(request) else None,
    )
    check_chat_request(chat)
    return chat


def _obfuscated(request: rp.ResponsesRequest) -> bool:
    return request.stream_options is not None and bool(request.stream_options.include_obfuscation)


def continued(added: list[Message], answer: Completion, max_calls: int | None = None) -> list[Message]:
    """What a turn adds to its conversation: its input's messages (``added``; never the
    instructions), then the answer (its text and the tool calls the response kept) as an assistant
    turn."""
    choice = answer.choices[0]
    made = choice.tool_calls if max_calls is None else choice.tool_calls[:max_calls]
    calls = [ToolCallIn(id=c.id, function=CalledFunction(c.name, c.arguments)) for c in made]
    text = choice.text if choice.text or not calls else None
    return [*added, Message(role="assistant", content=text, tool_calls=calls or None)]


_messages = msgspec.json.Decoder(list[Message])


def encode_thread(messages: list[Message]) -> bytes:
    return msgspec.json.encode(messages)


def decode_thread(data: bytes) -> list[Message]:
    return _messages.decode(data)
