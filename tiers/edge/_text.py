"""Text helpers for in-process engines: chat messages to plain text, stop sequences."""

from __future__ import annotations

from typing import Any


def flatten_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Chat templates of small text models want ``content`` as one string.

    Text parts are joined; ``developer`` (OpenAI's newer name) becomes ``system``.
    """
    flat = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(p["text"] for p in content if p.get("type") == "text")
        role = "system" if message["role"] == "developer" else message["role"]
        flat.append({"role": role, "content": content or ""})
    return flat


class StopScanner:
    """Finds stop sequences in streamed text without ever emitting part of one.

    ``feed`` returns the text that is safe to emit now: everything except a
    tail that could still grow into a stop sequence.
    """

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False

    def feed(self, piece: str) -> tuple[str, bool]:
        if not self._stops:
            return piece, False
        text = self._held + piece
        hits = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        if hits:
            self._held = ""
            self.stopped = True
            return text[: min(hits)], True
        keep = max((n for s in self._stops for n in range(1, len(s)) if text.endswith(s[:n])), default=0)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], False

    def flush(self, tail: str = "") -> str:
        text, self._held = self._held + tail, ""
        return text
