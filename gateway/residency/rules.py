"""A tenant's residency rules applied to a request: what fired, what it means for routing, and the
redaction of what a remote tier must not see (with its restoration in the answer, streamed too).

The text scanned is every message's text (string content and text parts), the arguments of earlier
tool calls, and tool results.  When several rules match, the strictest action decides for routing
(``refuse`` over ``keep_local`` over ``redact``); every rule that matched is named in the route reason
and counted, by its label and action, never with the matched text.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

import router
from gateway.residency.detect import DETECTORS, Detect, Span, Text, pattern
from tiers import ChoiceDone, Event, EventStream, Finished, TextDelta, ToolCallDelta

PLACEHOLDER = re.compile(r"\[[A-Z_]+_\d+\]")
LONGEST_PLACEHOLDER = 32


@dataclass(frozen=True, slots=True)
class Rule:
    label: str
    action: str
    detect: Detect


def compiled(rules: list[router.ResidencyRule]) -> tuple[Rule, ...]:
    return tuple(
        Rule(r.label, r.action, pattern(r.pattern) if r.pattern else DETECTORS[r.detector]) for r in rules
    )


def _texts(messages: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], str]]:
    """Every (holder, key) whose string value is text a tier reads."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            yield message, "content"
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    yield part, "text"
        for call in message.get("tool_calls") or ():
            yield call["function"], "arguments"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a request's text set off: every rule (label, action) that matched, and the strictest."""

    fired: tuple[tuple[str, str], ...] = ()
    redact: tuple[Rule, ...] = ()  # the redact rules that matched: applied for remote tiers

    def first(self, action: str) -> str | None:
        return next((label for label, a in self.fired if a == action), None)

    @property
    def note(self) -> str:
        """For the route reason and the ledger row: which rules decided, with their actions."""
        if not self.fired:
            return ""
        return "; residency: " + ", ".join(f"{label} -> {action}" for label, action in self.fired)


NOTHING = Verdict()


def scan(messages: list[dict[str, Any]], rules: tuple[Rule, ...]) -> Verdict:
    if not rules:
        return NOTHING
    texts = [Text(holder[key]) for holder, key in _texts(messages)]
    fired = [rule for rule in rules if any(next(rule.detect(t), None) is not None for t in texts)]
    if not fired:
        return NOTHING
    order = sorted(fired, key=lambda r: -router.ACTION_ORDER[r.action])
    return Verdict(tuple((r.label, r.action) for r in order), tuple(r for r in fired if r.action == "redact"))


@dataclass
class Redaction:
    """Placeholders for the spans of a request's text that redact rules matched, and the originals."""

    originals: dict[str, str] = field(default_factory=dict)
    _numbers: dict[str, int] = field(default_factory=dict)

    def _placeholder(self, label: str, value: str) -> str:
        for placeholder, original in self.originals.items():
            if original == value:
                return placeholder
        kind = re.sub(r"[^A-Z]+", "_", label.upper()).strip("_") or "DATA"
        self._numbers[kind] = self._numbers.get(kind, 0) + 1
        placeholder = f"[{kind}_{self._numbers[kind]}]"
        self.originals[placeholder] = value
        return placeholder

    def text(self, text: str, rules: tuple[Rule, ...]) -> str:
        scanned = Text(text)
        spans: list[tuple[Span, str]] = sorted((s, r.label) for r in rules for s in r.detect(scanned))
        out, at = [], 0
        for (start, end), label in spans:
            if start < at:  # overlaps one already replaced
                continue
            out += [text[at:start], self._placeholder(label, text[start:end])]
            at = end
        return "".join(out) + text[at:]

    def messages(self, messages: list[dict[str, Any]], rules: tuple[Rule, ...]) -> list[dict[str, Any]]:
        """A copy of ``messages`` with the matched spans replaced."""
        copy: list[dict[str, Any]] = msgspec.json.decode(msgspec.json.encode(messages))
        for holder, key in _texts(copy):
            holder[key] = self.text(holder[key], rules)
        return copy

    def restore(self, text: str) -> str:
        return PLACEHOLDER.sub(lambda m: self.originals.get(m.group(), m.group()), text)


class _Pending:
    """Text held back while it may end in the start of a placeholder."""

    def __init__(self, redaction: Redaction) -> None:
        self._redaction = redaction
        self._held = ""

    def feed(self, text: str) -> str:
        text = self._held + text
        cut = text.rfind("[")
        if cut != -1 and "]" not in text[cut:] and len(text) - cut < LONGEST_PLACEHOLDER:
            self._held, text = text[cut:], text[:cut]
        else:
            self._held = ""
        return self._redaction.restore(text)

    def flush(self) -> str:
        held, self._held = self._held, ""
        return self._redaction.restore(held)


async def restored(events: EventStream, redaction: Redaction) -> AsyncGenerator[Event, None]:
    """A remote tier's events with the originals put back for its placeholders, in text and tool-call
    arguments, also when a placeholder is split across pieces."""
    texts: dict[int, _Pending] = {}
    calls: dict[tuple[int, int], _Pending] = {}

    def pending(table: dict[Any, _Pending], key: Any) -> _Pending:
        return table.setdefault(key, _Pending(redaction))

    def flushed(choice: int | None) -> Iterator[Event]:
        for c, p in list(texts.items()):
            if (choice is None or c == choice) and (rest := p.flush()):
                yield TextDelta(rest, c)
        for (c, i), p in list(calls.items()):
            if (choice is None or c == choice) and (rest := p.flush()):
                yield ToolCallDelta(i, arguments=rest, choice=c)

    try:
        async for event in events:
            if isinstance(event, TextDelta):
                if text := pending(texts, event.choice).feed(event.text):
                    yield TextDelta(text, event.choice)
            elif isinstance(event, ToolCallDelta):
                arguments = pending(calls, (event.choice, event.index)).feed(event.arguments)
                if arguments or event.id:
                    yield msgspec.structs.replace(event, arguments=arguments)
            else:
                if isinstance(event, ChoiceDone | Finished):
                    for rest in flushed(event.choice if isinstance(event, ChoiceDone) else None):
                        yield rest
                yield event
    finally:
        await events.aclose()
