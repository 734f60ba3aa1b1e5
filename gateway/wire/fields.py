"""Every request field of OpenAI's API for the endpoints tiergate serves, and what tiergate does with it.

One entry per field of OpenAI's request schemas (``CreateChatCompletionRequest``, ``CreateResponse``,
``CreateCompletionRequest``, ``CreateEmbeddingRequest``, ``CreateTranscriptionRequest``,
``CreateTranslationRequest``, as ../shared/openai-openapi.json has them):
either :class:`Honoured` (and how), or :class:`Refused` with the error OpenAI itself gives for the field
with a model of tiergate's kind (a text model that does not reason, search, speak or moderate).
``tests/gateway/wire/test_fields.py`` fails when the spec has a field this inventory does not list, and
sends every refused field to check its error; docs/api.md's field table is printed from here
(``python -m gateway.wire.fields``).

A nullable field sent as null is the field left out, everywhere.  A refused field is decoded as raw
bytes (never built into Python objects) and refused when present and not null, by :func:`refuse`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import msgspec

from gateway.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class Honoured:
    how: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Refused when present: 400 ``invalid_request_error`` with this message and code, ``param``
    the field."""

    message: str
    code: str = "unsupported_parameter"


def _unsupported(field: str) -> Refused:
    # OpenAI's wording for a parameter the model at hand does not take.
    return Refused(f"Unsupported parameter: '{field}' is not supported with this model.")


SAMPLING = "sent to the tier's engine (llama.cpp, ONNX Runtime or vLLM) as its sampling parameter"

CHAT: Mapping[str, Honoured | Refused] = {
    "messages": Honoured("the conversation; text, image, audio and video parts (media prepared first)"),
    "model": Honoured("`tiergate-auto` (the router chooses), a tier's name, or an alias"),
    "metadata": Honoured("kept with the ledger row: cost reports by tag"),
    "temperature": Honoured(SAMPLING),
    "top_p": Honoured(SAMPLING),
    "top_logprobs": Honoured("log probabilities of the most likely tokens, from the engine"),
    "logprobs": Honoured("log probabilities of the tokens chosen, from the engine"),
    "user": Honoured(
        "validated (≤ 256 characters); the end user whose next similar question is a re-ask (a quality "
        "label), where no `prompt_cache_key` or `X-Session-ID` says the session"
    ),
    "safety_identifier": Honoured("validated (≤ 64 characters); the end user, as `user` (and before it)"),
    "prompt_cache_key": Honoured(
        "the affinity key: requests sharing it go to the same cloud replica and edge instance, "
        "whose prefix cache holds their prompt (instead of a hash of the conversation's opening); "
        "sent on to a hosted OpenAI or Azure provider tier, whose prompt cache it names"
    ),
    "prompt_cache_retention": Honoured(
        "`in_memory` (what the engines' prefix caches are); `24h` is refused as OpenAI refuses "
        "it for a model without extended caching"
    ),
    "prompt_cache_options": Honoured(
        "`ttl: 30m` and `mode: implicit` (automatic prefix caching, as vLLM and llama.cpp do); "
        "`mode: explicit` is refused: the engines have no cache breakpoints"
    ),
    "service_tier": Honoured("validated; one service tier here: answers say `default`"),
    "modalities": Honoured('`["text"]`; `"audio"` output is refused (no tier speaks)'),
    "verbosity": Honoured(
        "`medium` (the default); `low` and `high` are refused as OpenAI refuses them for a model "
        "without verbosity control"
    ),
    "reasoning_effort": Honoured(
        "passed to the cloud tier's vLLM (which hands it to the chat template), as vLLM's server "
        "does; the models here do not reason, so every value answers as `none` would "
        "(`reasoning_tokens` 0)"
    ),
    "max_completion_tokens": Honoured("the answer's token limit"),
    "max_tokens": Honoured("the answer's token limit (as `max_completion_tokens`)"),
    "frequency_penalty": Honoured(SAMPLING),
    "presence_penalty": Honoured(SAMPLING),
    "seed": Honoured(SAMPLING),
    "stop": Honoured("up to 4 stop sequences, applied by the engine"),
    "logit_bias": Honoured("token biases, in the engine's own vocabulary"),
    "n": Honoured("up to 8 answers (the edge samples them one after another)"),
    "response_format": Honoured("`text`, `json_object`, `json_schema`: constrained decoding"),
    "tools": Honoured("function tools (up to 128)"),
    "tool_choice": Honoured("`none`, `auto`, `required`, or a named function"),
    "parallel_tool_calls": Honoured("several calls in one answer, or one"),
    "stream": Honoured("server-sent events"),
    "stream_options": Honoured(
        "`include_usage`: a usage chunk before `[DONE]`; `include_obfuscation: true`: an "
        "`obfuscation` field of random length on every delta chunk (off unless asked)"
    ),
    "store": Honoured("validated; no stored chat completions here (the Responses API stores)"),
    "audio": _unsupported("audio"),
    "web_search_options": _unsupported("web_search_options"),
    "prediction": _unsupported("prediction"),
    "moderation": _unsupported("moderation"),
    "functions": Refused(
        "Unsupported parameter: 'functions' is not supported with this model. Use 'tools' instead."
    ),
    "function_call": Refused(
        "Unsupported parameter: 'function_call' is not supported with this model. Use 'tool_choice' instead."
    ),
}

RESPONSES: Mapping[str, Honoured | Refused] = {
    "model": CHAT["model"],
    "input": Honoured("a string or items: messages (text, image), function calls and their outputs"),
    "instructions": Honoured("a system message before the input"),
    "previous_response_id": Honoured("continues a stored response of the same tenant"),
    "metadata": CHAT["metadata"],
    "temperature": Honoured(SAMPLING),
    "top_p": Honoured(SAMPLING),
    "top_logprobs": CHAT["top_logprobs"],
    "user": Honoured("validated and echoed on the response"),
    "safety_identifier": Honoured("validated (≤ 64 characters) and echoed on the response, like `user`"),
    "prompt_cache_key": CHAT["prompt_cache_key"],
    "prompt_cache_retention": CHAT["prompt_cache_retention"],
    "prompt_cache_options": CHAT["prompt_cache_options"],
    "max_output_tokens": Honoured("the answer's token limit"),
    "max_tool_calls": Honoured("the most function calls one response makes; later ones are dropped"),
    "text": Honoured("`format` (text, json_object, json_schema); `verbosity` as in Chat Completions"),
    "tools": Honoured("function tools (up to 128); built-in tools are refused"),
    "tool_choice": CHAT["tool_choice"],
    "parallel_tool_calls": CHAT["parallel_tool_calls"],
    "include": Honoured("`message.output_text.logprobs`"),
    "store": Honoured("stored responses (default true), per tenant"),
    "stream": Honoured("server-sent events, OpenAI's response events"),
    "stream_options": Honoured("`include_obfuscation: true`: an `obfuscation` field on delta events"),
    "reasoning": Honoured("`effort` as `reasoning_effort` in Chat Completions; echoed on the response"),
    "service_tier": CHAT["service_tier"],
    "truncation": Honoured("`disabled` (the default); `auto` is refused"),
    "background": Honoured("`false`; background responses are refused"),
    "prompt": _unsupported("prompt"),
    "conversation": _unsupported("conversation"),
    "context_management": _unsupported("context_management"),
    "moderation": _unsupported("moderation"),
}

COMPLETIONS: Mapping[str, Honoured | Refused] = {
    "model": CHAT["model"],
    "prompt": Honoured(
        "a string or a list of them (each a generation); token-id prompts are a 400 (the models here "
        "do not read OpenAI's vocabulary)"
    ),
    "best_of": Honoured("equal to `n` (sampling more and keeping the best is refused)"),
    "echo": Honoured("the prompt before the completion"),
    "frequency_penalty": Honoured(SAMPLING),
    "presence_penalty": Honoured(SAMPLING),
    "logit_bias": CHAT["logit_bias"],
    "logprobs": Honoured("log probabilities of the chosen and most likely tokens"),
    "max_tokens": Honoured("the completion's token limit"),
    "n": CHAT["n"],
    "seed": Honoured(SAMPLING),
    "stop": CHAT["stop"],
    "stream": CHAT["stream"],
    "stream_options": Honoured("`include_usage`: a usage chunk before `[DONE]`"),
    "suffix": Honoured("null or empty; any other is a 400: the models here do not fill in the middle"),
    "temperature": Honoured(SAMPLING),
    "top_p": Honoured(SAMPLING),
    "user": CHAT["user"],
}

EMBEDDINGS: Mapping[str, Honoured | Refused] = {
    "model": Honoured("the embedding model (all-MiniLM-L6-v2) or an alias"),
    "input": Honoured(
        "a string, a list of strings, or token ids of OpenAI's `cl100k_base` (turned back into text "
        "for the model's own vocabulary)"
    ),
    "encoding_format": Honoured("`float` or `base64`"),
    "dimensions": Honoured("384, the model's; another is a 400 (MiniLM was not trained to be shortened)"),
    "user": Honoured("validated (≤ 256 characters), as OpenAI's; an embedding has no session to label"),
}

TRANSLATIONS: Mapping[str, Honoured | Refused] = {
    "file": Honoured("the audio (WAV, MP3, OGG, FLAC, ...), decoded and resampled off the event loop"),
    "model": Honoured("the speech model (Whisper base) or `whisper-1`"),
    "prompt": Honoured("Whisper's initial prompt (its text conditions the decoding)"),
    "response_format": Honoured("`json`, `text`, `srt`, `verbose_json`, `vtt`"),
    "temperature": Honoured("Whisper's sampling temperature (0 to 1)"),
}

TRANSCRIPTIONS: Mapping[str, Honoured | Refused] = {
    **TRANSLATIONS,
    "language": Honoured("the spoken language (ISO-639-1); else Whisper detects it"),
    "timestamp_granularities": Honoured("`segment` and `word` timings in `verbose_json`"),
    "stream": Honoured("`transcript.text.delta` events, then `transcript.text.done`"),
    "languages": _unsupported("languages"),
    "keywords": _unsupported("keywords"),
    "include": _unsupported("include"),
    "chunking_strategy": _unsupported("chunking_strategy"),
    "known_speaker_names": _unsupported("known_speaker_names"),
    "known_speaker_references": _unsupported("known_speaker_references"),
}

INVENTORY: Mapping[str, Mapping[str, Honoured | Refused]] = {
    "CreateChatCompletionRequest": CHAT,
    "CreateResponse": RESPONSES,
    "CreateCompletionRequest": COMPLETIONS,
    "CreateEmbeddingRequest": EMBEDDINGS,
    "CreateTranscriptionRequest": TRANSCRIPTIONS,
    "CreateTranslationRequest": TRANSLATIONS,
}

_NULL = b"null"


def refuse_named(names: Iterable[str], fields: Mapping[str, Honoured | Refused]) -> None:
    """Raise OpenAI's error for the first of ``names`` (a form's fields) that is refused."""
    for name in names:
        entry = fields.get(name)
        if isinstance(entry, Refused):
            raise InvalidRequest(entry.message, param=name, code=entry.code)


def refuse(request: msgspec.Struct, fields: Mapping[str, Honoured | Refused]) -> None:
    """Raise OpenAI's error for the first refused field ``request`` carries (not null)."""
    for name, entry in fields.items():
        if isinstance(entry, Refused):
            raw = getattr(request, name, None)
            if isinstance(raw, msgspec.Raw) and bytes(raw) != _NULL:
                raise InvalidRequest(entry.message, param=name, code=entry.code)


def unsupported_value(param: str, value: str, supported: str) -> InvalidRequest:
    """OpenAI's error for a value its model at hand does not take."""
    return InvalidRequest(
        f"Unsupported value: '{param}' does not support '{value}' with this model. "
        f"Supported values are: '{supported}'.",
        param=param,
        code="unsupported_value",
    )


def check_values(
    verbosity: str | None, retention: str | None, cache_mode: str | None, *, prefix: str = ""
) -> None:
    """The values of fields this gateway takes in part (Chat Completions and Responses alike)."""
    if verbosity not in (None, "medium"):
        raise unsupported_value(f"{prefix}verbosity", str(verbosity), "medium")
    if retention == "24h":
        raise unsupported_value("prompt_cache_retention", retention, "in_memory")
    if cache_mode == "explicit":
        raise unsupported_value("prompt_cache_options.mode", cache_mode, "implicit")


def table() -> str:
    """The inventory as Markdown, for docs/api.md."""
    lines = []
    for schema, fields in INVENTORY.items():
        lines += [f"### `{schema}`", "", "| field | here |", "|---|---|"]
        for name, entry in fields.items():
            if isinstance(entry, Honoured):
                lines.append(f"| `{name}` | {entry.how} |")
            else:
                lines.append(f"| `{name}` | refused: 400 `{entry.code}`, “{entry.message}” |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
