"""What vLLM produced, checked against what the request asked for before it is passed on: a tool
call to a function the request did not offer, arguments that are not JSON or break the function's
parameter schema, or content that breaks the ``response_format`` schema is an
:class:`~tiers.OutputRefused` (a 502 that says so), never an answer that looks valid.  An answer cut
short (``length``) is not checked: it is incomplete by the client's own limit, as OpenAI's would be."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema_rs
import msgspec

from tiers._errors import OutputRefused
from tiers._events import Event, TextDelta, ToolCallDelta
from tiers._types import Generation


def _refuse_remote(uri: str) -> Any:
    raise ValueError(f"{uri} is not fetched")


_encode = msgspec.json.Encoder().encode


@functools.lru_cache(maxsize=256)
def _compiled(text: bytes) -> jsonschema_rs.Validator:
    """Validators by schema text: the same tools come with every request of a conversation."""
    return jsonschema_rs.validator_for(json.loads(text), retriever=_refuse_remote)


def _validator(schema: dict[str, Any] | None) -> jsonschema_rs.Validator | None:
    return None if schema is None else _compiled(_encode(schema))


def greedy_copies(gen: Generation) -> int:
    """How many times one answer stands for all ``n``: at temperature 0 every choice is the same
    greedy answer, and vLLM refuses n > 1 without sampling (OpenAI does not), so it is asked once."""
    return gen.n if gen.n > 1 and gen.temperature == 0 else 1


class _Choice:
    __slots__ = ("calls", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[list[str]] = []  # [name, arguments] per call index


class OutputCheck:
    """Built per request; fed the answer's pieces, it raises at the end if they break the request."""

    def __init__(self, gen: Generation, tier: str) -> None:
        self.n = gen.n
        self.copies = greedy_copies(gen)
        self.tier = tier
        self._tools = {t["function"]["name"]: _validator(t["function"].get("parameters")) for t in gen.tools}
        self._must_call = gen.tool_mode in ("required", "named")
        fmt = gen.response_format or {}
        self._format = fmt.get("type")
        self._schema = _validator((fmt.get("json_schema") or {}).get("schema")) if self._format else None
        self._choices: dict[int, _Choice] = {}

    @property
    def idle(self) -> bool:
        """Nothing to check (no tools, no response format)."""
        return not self._tools and not self._format

    def piece(self, event: Event) -> None:
        if self.idle:
            return
        choice = self._choices.setdefault(getattr(event, "choice", 0), _Choice())
        if isinstance(event, TextDelta):
            choice.text.append(event.text)
        elif isinstance(event, ToolCallDelta):
            while len(choice.calls) <= event.index:
                choice.calls.append(["", ""])
            call = choice.calls[event.index]
            call[0] = call[0] or event.name
            call[1] += event.arguments

    def whole(self, pieces: list[Event]) -> None:
        for piece in pieces:
            self.piece(piece)

    def finished(self, reasons: dict[int, str]) -> None:
        """Raise :class:`TierFailed` if a finished choice breaks the request's tools or format."""
        if self._must_call:  # every choice must call; one that produced nothing has no entry yet
            for index in range(self.n):
                self._choices.setdefault(index, _Choice())
        for index, choice in self._choices.items():
            if reasons.get(index, "stop") == "length":
                continue
            if self._must_call and not choice.calls:
                raise self._fail("the request's tool_choice demands a tool call and it made none")
            if choice.calls:
                for name, arguments in choice.calls:
                    self._check_call(name, arguments)
            elif self._format:
                self._check_content("".join(choice.text))

    def _fail(self, message: str) -> OutputRefused:
        return OutputRefused(self.tier, f"the model's answer was refused: {message}")

    def _check_call(self, name: str, arguments: str) -> None:
        if name not in self._tools:
            raise self._fail(f"it calls {name[:64]!r}, which is not among the request's tools")
        value = self._parse(arguments, f"the arguments of {name}")
        validator = self._tools[name]
        if validator is not None and not validator.is_valid(value):
            error = next(validator.iter_errors(value))
            raise self._fail(f"the arguments of {name} break its parameters schema: {error.message[:200]}")

    def _check_content(self, text: str) -> None:
        value = self._parse(text, "the content")
        if self._format == "json_object" and not isinstance(value, dict):
            raise self._fail("the content is JSON but not an object")
        if self._schema is not None and not self._schema.is_valid(value):
            error = next(self._schema.iter_errors(value))
            raise self._fail(f"the content breaks the response_format schema: {error.message[:200]}")

    def _parse(self, text: str, what: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise self._fail(f"not valid JSON in {what} ({exc})") from exc
