"""Cache keys: tenant + routing rule identity + a canonical form of the request.

The canonical form is the JSON of the messages and sampling parameters with
sorted keys and no ``None`` values; a media part keeps its type and options but
its payload (URL or base64 data) is replaced by the payload's SHA-256, so a
key is small whatever the media weigh.  A key starts with the tenant, quoted, so
no two tenants can ever share one (and a backend can list or drop one tenant's
entries by prefix).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import msgspec

KEY_VERSION = "v1"

# OpenAI content part type → (field holding the payload object, the payload's own field).
_MEDIA_PAYLOADS = {
    "image_url": ("image_url", "url"),
    "input_audio": ("input_audio", "data"),
    "video_url": ("video_url", "url"),
}
_encode = msgspec.json.Encoder(order="sorted").encode


def content_hash(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()


def _canonical_part(part: Mapping[str, Any]) -> Any:
    kind = part.get("type")
    media = _MEDIA_PAYLOADS.get(str(kind))
    if media is None:
        return _drop_none(part)
    outer, field = media
    inner = dict(part.get(outer) or {})
    payload = inner.pop(field, "")
    inner["sha256"] = content_hash(str(payload))
    return {"type": kind, outer: _drop_none(inner)}


def _canonical_content(content: Any) -> Any:
    if isinstance(content, list):
        parts = [_canonical_part(p) for p in content]
        # [{"type": "text", "text": "x"}] and "x" are the same prompt.
        if len(parts) == 1 and parts[0].get("type") == "text":
            return parts[0].get("text")
        return parts
    return content


def _drop_none(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if v is not None}


def canonical_request(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> bytes:
    """The bytes that identify a request's answer: messages (media by hash) and sampling params."""
    canonical = [{**_drop_none(m), "content": _canonical_content(m.get("content"))} for m in messages]
    return _encode({"messages": canonical, "params": _drop_none(params)})


def result_key(
    tenant: str, rule: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
) -> str:
    """The key of one request's answer for ``tenant`` under the routing rule identified by ``rule``."""
    digest = hashlib.sha256()
    for piece in (tenant.encode(), b"\0", rule.encode(), b"\0", canonical_request(messages, params)):
        digest.update(piece)
    return f"{KEY_VERSION}/{quote(tenant, safe='')}/{digest.hexdigest()}"


def embedding_key(tenant: str, model: str, token_ids: Sequence[int]) -> str:
    """The key of one input's embedding for ``tenant``: the model and the input's token ids (a text and
    the same text sent as its tokens share one entry)."""
    digest = hashlib.sha256(model.encode() + b"\0")
    digest.update(",".join(map(str, token_ids)).encode())
    return f"emb-{KEY_VERSION}/{quote(tenant, safe='')}/{digest.hexdigest()}"
