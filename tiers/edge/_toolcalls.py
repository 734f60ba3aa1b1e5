"""A choice's decoded text → events: plain text as :class:`TextDelta`, Hermes ``<tool_call>`` blocks
(the format of :mod:`tiers.edge._grammar`) as :class:`ToolCallDelta`.

A call's first delta carries its id (``call_`` and 24 random letters and digits) and name, sent as soon as
the name is complete; then its arguments' text as it is decoded, holding back only what could still be
the fixed close ``}\\n</tool_call>``.  Text before the first call is text (one "\\n" before a call, the
separator the template writes, is dropped); text that only could begin a call is held until it is clear.
Without tools in play (:class:`PlainText`) every piece is text.
"""

from __future__ import annotations

import json
import logging
import secrets
import string

from tiers._errors import TierFailed
from tiers._events import Event, TextDelta, ToolCallDelta
from tiers.edge._grammar import ARGUMENTS_KEY, CALL_CLOSE, CALL_HEAD, CALL_OPEN

log = logging.getLogger(__name__)

ID_ALPHABET = string.ascii_letters + string.digits
OPEN = CALL_OPEN + CALL_HEAD  # '<tool_call>\n{"name": "'


def call_id() -> str:
    return "call_" + "".join(secrets.choice(ID_ALPHABET) for _ in range(24))


def _partial(text: str, marker: str) -> int:
    """The length of the longest tail of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


class PlainText:
    """Every piece is the choice's text."""

    def __init__(self, choice: int) -> None:
        self.choice = choice
        self.calls = 0
        self.open_call = False

    def feed(self, text: str) -> list[Event]:
        return [TextDelta(text, self.choice)] if text else []

    def finish(self) -> list[Event]:
        return []


class ToolCallText:
    """Text with Hermes tool calls in it, as events."""

    def __init__(self, choice: int, tier: str = "edge") -> None:
        self.choice = choice
        self._tier = tier
        self._held = ""  # text not yet sent: a possible call opening, or a call's unread part
        self._state = "text"  # text | name | arguments | between
        self._pieces: list[str] = []  # the open call's arguments so far
        self.calls = 0  # calls completed
        self.open_call = False  # a call has begun and not ended

    def feed(self, text: str) -> list[Event]:
        self._held += text
        out: list[Event] = []
        while True:
            step = getattr(self, "_" + self._state)(out)
            if not step:
                return out

    def finish(self) -> list[Event]:
        """The rest, when the answer ends: held text that opened no call is text after all."""
        out: list[Event] = []
        if self._state == "text" and self._held:
            out.append(TextDelta(self._held, self.choice))
        elif self._state == "arguments" and self._held:
            out.append(ToolCallDelta(self.calls, arguments=self._held, choice=self.choice))
        elif self._state == "between" and self._held:  # another call had begun
            self.open_call = True
        self._held = ""
        return out

    # -- states: each consumes what it can of the held text; True when the state changed ----------

    def _text(self, out: list[Event]) -> bool:
        at = self._held.find(OPEN)
        if at >= 0:
            before = self._held[:at]
            if before.endswith("\n"):
                before = before[:-1]
            if before:
                out.append(TextDelta(before, self.choice))
            self._held = self._held[at + len(OPEN) :]
            self._state, self.open_call = "name", True
            return True
        keep = max(_partial(self._held, "\n" + OPEN), _partial(self._held, OPEN))
        ready = self._held[: len(self._held) - keep]
        if ready:
            out.append(TextDelta(ready, self.choice))
        self._held = self._held[len(ready) :]
        return False

    def _name(self, out: list[Event]) -> bool:
        at = self._held.find(ARGUMENTS_KEY)
        if at < 0:
            return False
        name = self._held[:at]
        self._held = self._held[at + len(ARGUMENTS_KEY) :]
        out.append(ToolCallDelta(self.calls, id=call_id(), name=name, choice=self.choice))
        self._pieces = []
        self._state = "arguments"
        return True

    def _arguments(self, out: list[Event]) -> bool:
        held = self._held
        at = held.find(CALL_CLOSE)
        end = at if at >= 0 else len(held) - _partial(held, CALL_CLOSE)
        piece = held[:end]
        if piece:
            out.append(ToolCallDelta(self.calls, arguments=piece, choice=self.choice))
            self._pieces.append(piece)
        if at < 0:
            self._held = held[end:]
            return False
        self._held = held[at + len(CALL_CLOSE) :]
        self._close()
        return True

    def _between(self, out: list[Event]) -> bool:
        """After a call: "\\n" and another call, or (leniently) more text."""
        if len(self._held) < len("\n" + OPEN) and ("\n" + OPEN).startswith(self._held):
            return False
        if self._held.startswith("\n" + OPEN):
            self._held = self._held[len("\n" + OPEN) :]
            self._state, self.open_call = "name", True
            return True
        self._state = "text"
        return bool(self._held)

    def _close(self) -> None:
        text = "".join(self._pieces)
        try:
            json.loads(text)
        except ValueError as exc:  # the grammar makes this impossible: an engine fault if seen
            raise TierFailed(self._tier, f"tool call {self.calls} has arguments that are not JSON") from exc
        self.calls += 1
        self.open_call = False
        self._state = "between"
