"""Media in the form the engine takes: a preprocessed video becomes its frames as image parts
(vLLM serves image-language models such as Idefics3 that take no video of their own), preceded
by a line saying what they are, and its audio track as an ``input_audio`` part when it has one."""

from __future__ import annotations

from typing import Any


def engine_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (plain dicts) with every ``video_frames`` part expanded; the same list when none."""
    if not any(
        isinstance(m.get("content"), list) and any(p.get("type") == "video_frames" for p in m["content"])
        for m in messages
    ):
        return messages
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts: list[dict[str, Any]] = []
            for part in content:
                if part.get("type") != "video_frames":
                    parts.append(part)
                    continue
                times = ", ".join(f"{t:.1f}s" for t in part["times"])
                parts.append({"type": "text", "text": f"(video, {part['seconds']:.1f} s; frames at {times})"})
                parts.extend({"type": "image_url", "image_url": frame} for frame in part["frames"])
                if part.get("audio"):
                    parts.append({"type": "input_audio", "input_audio": part["audio"]})
            message = {**message, "content": parts}
        out.append(message)
    return out
