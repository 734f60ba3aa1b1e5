"""``GET /v1/responses/{id}/input_items``: a stored response's input, as OpenAI's paged list of items.

The store keeps what a turn added to its conversation as chat messages (its input, then its answer);
the input is those messages but the last, each shown as the Responses item it stands for.  An
item's id is made from the response's id and the item's place, so the same item keeps its id from
one page to the next (``after`` names one).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire.chat import ImagePart, Message, TextPart

MAX_LIMIT = 100


class Page(msgspec.Struct, forbid_unknown_fields=True):
    """The query: OpenAI's paging parameters (``include`` takes what OpenAI names for input items)."""

    after: str | None = None
    limit: int = 20
    order: Literal["asc", "desc"] = "desc"


def _id(prefix: str, response_id: str, index: int) -> str:
    digest = hashlib.blake2b(f"{response_id}#{index}".encode(), digest_size=16).hexdigest()
    return f"{prefix}_{digest}"


def _content(message: Message) -> list[dict[str, Any]]:
    output = message.role == "assistant"
    if isinstance(message.content, str) or message.content is None:
        text = message.content or ""
        return [
            {"type": "output_text", "text": text, "annotations": []}
            if output
            else {"type": "input_text", "text": text}
        ]
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            parts.append({"type": "input_text", "text": part.text})
        elif isinstance(part, ImagePart):
            parts.append(
                {"type": "input_image", "image_url": part.image_url.url, "detail": part.image_url.detail}
            )
    return parts


def items_of(messages: list[Message], response_id: str) -> list[dict[str, Any]]:
    """The Responses items ``messages`` (a turn's input, as chat messages) stand for, in order."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "id": _id("fco", response_id, len(items)),
                    "call_id": message.tool_call_id,
                    "output": message.content if isinstance(message.content, str) else "",
                    "status": "completed",
                }
            )
            continue
        if message.content is not None or not message.tool_calls:
            items.append(
                {
                    "type": "message",
                    "id": _id("msg", response_id, len(items)),
                    "role": message.role,
                    "status": "completed",
                    "content": _content(message),
                }
            )
        for call in message.tool_calls or ():
            items.append(
                {
                    "type": "function_call",
                    "id": _id("fc", response_id, len(items)),
                    "call_id": call.id,
                    "name": call.function.name,
                    "arguments": call.function.arguments,
                    "status": "completed",
                }
            )
    return items


def page(items: list[dict[str, Any]], query: Page) -> dict[str, Any]:
    """OpenAI's list object: ``limit`` items after the one ``after`` names, in ``order``."""
    if not 1 <= query.limit <= MAX_LIMIT:
        raise InvalidRequest(
            f"Invalid 'limit': expected a value between 1 and {MAX_LIMIT}, got {query.limit}",
            param="limit",
            code="integer_above_max_value" if query.limit > MAX_LIMIT else "integer_below_min_value",
        )
    ordered = items if query.order == "asc" else items[::-1]
    start = 0
    if query.after is not None:
        ids = [item["id"] for item in ordered]
        if query.after not in ids:
            raise InvalidRequest(
                f"No input item with id {query.after[:64]!r} in this response", param="after"
            )
        start = ids.index(query.after) + 1
    data = ordered[start : start + query.limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + query.limit < len(ordered),
    }
