"""The OpenAPI 3.1 description of the OpenAI-compatible endpoints, served at ``/schema/openapi.json``.

Built from the same msgspec models the gateway decodes and encodes with (``gateway/wire/chat.py``,
``gateway/wire/chat_response.py``),
so the schema cannot drift from what the handlers accept and send.  The chat handler reads its
body itself (one msgspec decode, no framework validation on the hot path), which is why the
request body is described here rather than inferred by Litestar.  The admin API is not in it.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
from litestar import Response, get
from litestar.di import NamedDependency

from gateway.api.completions.answer import TextCompletion
from gateway.services import Services
from gateway.wire.chat import MAX_CHOICES, ChatCompletionRequest
from gateway.wire.chat_response import ChatCompletion, ModelCard, ModelList
from gateway.wire.completions import MAX_PROMPTS, CompletionRequest
from gateway.wire.embeddings import EmbeddingList, EmbeddingRequest


class ErrorDetail(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(msgspec.Struct):
    """OpenAI's error shape; every 4xx and 5xx has it."""

    error: ErrorDetail


_REF = "#/components/schemas/{name}"
_ERROR = {"$ref": _REF.format(name="ErrorBody")}
_EVENT = {
    "type": "object",
    "properties": {
        "data": {"type": "string", "contentMediaType": "application/json"},
        "event": {"type": "string"},
    },
    "required": ["data"],
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    what = {
        400: "malformed JSON or fields (param names the field)",
        401: "missing, wrong or revoked API key",
        403: "an admin key used for chat",
        404: "unknown model",
        413: "body over server.max_body_bytes, or a medium over its limits (bytes, pixels, seconds, parts)",
        415: "a medium in a format, codec or MIME type the gateway does not take",
        422: "a medium that is corrupt, truncated, empty, or could not be decoded in time",
        429: "a tenant limit or a full queue (Retry-After)",
        502: "a tier failed",
        503: "no tier can serve now, or the key database is away",
    }
    return {str(s): _json(_ERROR, what[s]) for s in statuses}


def _speech_paths(speech_models: tuple[str, ...]) -> dict[str, Any]:
    """``/v1/audio/transcriptions`` and ``/translations``: a multipart form (gateway/wire/audio.py reads
    it; written out here, as the form is not a msgspec struct)."""
    if not speech_models:
        return {}
    fields: dict[str, Any] = {
        "file": {"type": "string", "contentMediaType": "application/octet-stream"},
        "model": {"type": "string", "enum": list(speech_models)},
        "prompt": {"type": "string", "maxLength": 65536},
        "response_format": {"enum": ["json", "text", "srt", "verbose_json", "vtt"], "default": "json"},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1, "default": 0},
    }
    transcribe = {
        **fields,
        "language": {"type": "string", "pattern": "^[A-Za-z]{2,3}$"},
        "timestamp_granularities[]": {"type": "array", "items": {"enum": ["segment", "word"]}},
        "stream": {"type": "boolean", "default": False},
    }
    text = {"type": "string"}
    answer = {
        "application/json": {"schema": {"type": "object", "required": ["text"]}},
        "text/plain": {"schema": text},
        "application/x-subrip": {"schema": text},
        "text/vtt": {"schema": text},
    }

    def operation(name: str, form: dict[str, Any], stream: bool) -> dict[str, Any]:
        content = {**answer, **({"text/event-stream": {"schema": _EVENT}} if stream else {})}
        body = {
            "type": "object",
            "properties": form,
            "required": ["file", "model"],
            "additionalProperties": False,
        }
        return {
            "post": {
                "operationId": name,
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": body}}},
                "responses": {
                    "200": {"description": "the text in the response_format asked", "content": content},
                    **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503),
                },
            }
        }

    return {
        "/v1/audio/transcriptions": operation("createTranscription", transcribe, True),
        "/v1/audio/translations": operation("createTranslation", fields, False),
    }


@functools.cache
def openapi_document(
    models: tuple[str, ...], embedding_models: tuple[str, ...] = (), speech_models: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The document for a gateway serving ``models``, ``embedding_models`` and ``speech_models`` (any
    other name is a 404)."""
    (request, completion, model_list, model_card, _, legacy, text, embed, vectors), components = (
        msgspec.json.schema_components(
            [
                ChatCompletionRequest,
                ChatCompletion,
                ModelList,
                ModelCard,
                ErrorBody,
                CompletionRequest,
                TextCompletion,
                EmbeddingRequest,
                EmbeddingList,
            ],
            ref_template=_REF,
        )
    )
    # Legacy completions: text prompts only, and no suffix (no tier's model fills in the middle).
    legacy_fields = components["CompletionRequest"]["properties"]
    legacy_fields["model"] = {"type": "string", "enum": list(models)}
    text_prompt = {"type": "string", "minLength": 1}
    legacy_fields["prompt"] = {
        "anyOf": [
            text_prompt,
            {"type": "array", "items": text_prompt, "minItems": 1, "maxItems": MAX_PROMPTS},
        ]
    }
    legacy_fields["suffix"] = {"enum": ["", None], "default": None}
    if embedding_models:
        components["EmbeddingRequest"]["properties"]["model"] = {
            "type": "string",
            "enum": list(embedding_models),
        }
    request_schema = components["ChatCompletionRequest"]
    # What the parser checks beyond the types: only an assistant's turn may lack content (when it has
    # tool calls), only a tool's carries a tool_call_id; tool_choice needs tools.
    request_schema["properties"]["model"] = {"type": "string", "enum": list(models)}
    request_schema["properties"]["n"] = {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_CHOICES,
        "default": 1,
    }
    request_schema["dependentRequired"] = {"tool_choice": ["tools"], "top_logprobs": ["logprobs"]}
    components["Message"]["anyOf"] = [
        {
            "required": ["tool_calls"],
            "properties": {"role": {"const": "assistant"}, "tool_call_id": False},
        },
        {
            "required": ["content"],
            "properties": {
                "role": {"enum": ["system", "developer", "user", "assistant"]},
                "content": {"not": {"type": "null"}},
                "tool_calls": False,
                "tool_call_id": False,
            },
        },
        {
            "required": ["content", "tool_call_id"],
            "properties": {
                "role": {"const": "tool"},
                "content": {"not": {"type": "null"}},
                "tool_calls": False,
            },
        },
    ]
    secured: list[dict[str, list[str]]] = [{"bearer": []}]
    status = {"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}
    ready = {"type": "object", "properties": {"ready": {"type": "boolean"}}, "required": ["ready"]}
    return {
        "openapi": "3.1.0",
        "info": {"title": "tiergate", "version": "0.1.0", "description": "OpenAI-compatible chat gateway"},
        "paths": {
            "/v1/chat/completions": {
                "post": {
                    "operationId": "createChatCompletion",
                    "security": secured,
                    "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
                    "responses": {
                        "200": {
                            "description": "the completion, or with stream=true its server-sent events",
                            "content": {
                                "application/json": {"schema": completion},
                                # each event: a chunk (ChatCompletionChunk) as JSON, an error, or [DONE]
                                "text/event-stream": {"schema": _EVENT},
                            },
                        },
                        **_errors(400, 401, 403, 404, 413, 415, 422, 429, 502, 503),
                    },
                }
            },
            "/v1/completions": {
                "post": {
                    "operationId": "createCompletion",
                    "security": secured,
                    "requestBody": {"required": True, "content": {"application/json": {"schema": legacy}}},
                    "responses": {
                        "200": {
                            "description": "the text completion, or with stream=true its server-sent events",
                            "content": {
                                "application/json": {"schema": text},
                                # each event: a text_completion chunk as JSON, an error, or [DONE]
                                "text/event-stream": {"schema": _EVENT},
                            },
                        },
                        **_errors(400, 401, 403, 404, 413, 429, 502, 503),
                    },
                }
            },
            **(
                {
                    "/v1/embeddings": {
                        "post": {
                            "operationId": "createEmbedding",
                            "security": secured,
                            "requestBody": {
                                "required": True,
                                "content": {"application/json": {"schema": embed}},
                            },
                            "responses": {
                                "200": _json(vectors, "one vector per input, in order"),
                                **_errors(400, 401, 403, 404, 413, 429, 503),
                            },
                        }
                    }
                }
                if embedding_models
                else {}
            ),
            **_speech_paths(speech_models),
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "security": secured,
                    "responses": {"200": _json(model_list, "the model names"), **_errors(401, 503)},
                }
            },
            "/v1/models/{model}": {
                "get": {
                    "operationId": "retrieveModel",
                    "security": secured,
                    "parameters": [
                        {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                    "responses": {"200": _json(model_card, "the model"), **_errors(401, 404, 503)},
                }
            },
            "/healthz": {"get": {"operationId": "healthz", "responses": {"200": _json(status, "alive")}}},
            "/readyz": {
                "get": {
                    "operationId": "readyz",
                    "responses": {"200": _json(ready, "a tier can serve"), "503": _json(ready, "none can")},
                }
            },
        },
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


@get("/schema/openapi.json", include_in_schema=False)
async def openapi_json(services: NamedDependency[Services]) -> Response[bytes]:
    embedding = services.embeddings.model_names if services.embeddings is not None else []
    speech = services.speech.model_names if services.speech is not None else []
    document = openapi_document(tuple(services.tiers.model_names), tuple(embedding), tuple(speech))
    return Response(msgspec.json.encode(document), media_type="application/json")


OPENAPI_ROUTES = [openapi_json]
