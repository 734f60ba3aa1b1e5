"""Text helpers for in-process engines: chat messages to a prompt, stop sequences.

A legacy completion's prompt (``Generation.prompt``) is not rendered: the engine tokenizes it as it
is, adding what the model's tokenizer adds to a plain text (a BOS token, for a model that wants one;
SmolLM2 adds none), as vLLM's ``/v1/completions`` does (:func:`prompt_text`).

Both engines render prompts with one template, the shared ChatML + Hermes tools template
(``tiers/chat_templates/chatml-tools.jinja``; without tools it renders byte for byte what SmolLM2's own
template does, so prompt prefixes and their caches are unchanged), the way transformers'
``apply_chat_template`` renders: a sandboxed jinja2 environment with ``trim_blocks`` and
``lstrip_blocks`` and transformers' ``tojson`` (``json.dumps(x, ensure_ascii=False)``).
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

from tiers._types import Generation

TOOLS_TEMPLATE = "chatml-tools.jinja"


def flatten_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat templates of small text models want ``content`` as one string.

    Text parts are joined; ``developer`` (OpenAI's newer name) becomes ``system``.  An assistant's
    ``tool_calls`` (their ``arguments`` a JSON string, which the template writes as it is) and a tool
    message's ``tool_call_id`` are kept.
    """
    flat = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(p["text"] for p in content if p.get("type") == "text")
        role = "system" if message["role"] == "developer" else message["role"]
        out: dict[str, Any] = {"role": role, "content": content or ""}
        if message.get("tool_calls"):
            out["tool_calls"] = message["tool_calls"]
        if message.get("tool_call_id"):
            out["tool_call_id"] = message["tool_call_id"]
        flat.append(out)
    return flat


def _raise_template_error(message: str) -> None:
    raise ValueError(f"chat template: {message}")


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


@cache
def _template() -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_template_error
    return env.from_string(files("tiers").joinpath("chat_templates", TOOLS_TEMPLATE).read_text())


def render_prompt(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, bos: str = "", eos: str = ""
) -> str:
    """The prompt text for ``messages`` (and ``tools``), ending where the assistant's answer begins.
    Raises ValueError when the template refuses the messages."""
    from jinja2 import TemplateError

    try:
        return str(
            _template().render(
                messages=flatten_messages(messages),
                tools=tools or None,
                add_generation_prompt=True,
                bos_token=bos,
                eos_token=eos,
            )
        )
    except TemplateError as exc:
        raise ValueError(f"chat template: {exc}") from exc


def prompt_text(gen: Generation, bos: str = "", eos: str = "") -> tuple[str, bool]:
    """The text an engine tokenizes for ``gen``, and whether the tokenizer adds the model's own
    special tokens: a legacy completion's prompt as it is (they are added: a BOS, if the model wants
    one), else the rendered chat (the template writes them itself). Raises what :func:`render_prompt`
    raises."""
    if gen.prompt is not None:
        return gen.prompt, True
    return render_prompt(gen.messages, gen.tools, bos, eos), False


class StopScanner:
    """Finds stop sequences in streamed text without ever emitting part of one.

    ``feed`` returns the text that is safe to emit now: everything except a
    tail that could still grow into a stop sequence.
    """

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False
        self.matched = ""  # the stop sequence found

    def feed(self, piece: str) -> tuple[str, bool]:
        if not self._stops:
            return piece, False
        text = self._held + piece
        hits = [(i, s) for i, s in ((text.find(s), s) for s in self._stops) if i >= 0]
        if hits:
            at, self.matched = min(hits, key=lambda hit: hit[0])
            self._held = ""
            self.stopped = True
            return text[:at], True
        keep = max((n for s in self._stops for n in range(1, len(s)) if text.endswith(s[:n])), default=0)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], False

    def flush(self, tail: str = "") -> str:
        text, self._held = self._held + tail, ""
        return text
