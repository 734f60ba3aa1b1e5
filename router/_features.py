"""What the router knows about a request: cheap numbers taken from its messages."""

from __future__ import annotations

from dataclasses import dataclass

from tiers import Modality

# About four characters of English per token for the SmolLM2/Gemma tokenizers, plus
# the chat template's few tokens per turn.
CHARS_PER_TOKEN = 4.0
TOKENS_PER_TURN = 4


@dataclass(frozen=True, slots=True)
class Features:
    prompt_tokens: int  # an estimate
    max_tokens: int | None
    turns: int
    modalities: frozenset[Modality]
    stream: bool

    @classmethod
    def estimate(
        cls,
        *,
        text_chars: int,
        turns: int,
        max_tokens: int | None,
        modalities: frozenset[Modality],
        stream: bool,
    ) -> Features:
        prompt = int(text_chars / CHARS_PER_TOKEN) + TOKENS_PER_TURN * turns
        return cls(prompt, max_tokens, turns, modalities, stream)
