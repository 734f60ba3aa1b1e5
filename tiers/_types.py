"""Engine-neutral request, result and state types shared by every tier.

A tier receives a :class:`Generation` (OpenAI-style messages plus sampling
parameters) and answers with a stream of events (:mod:`tiers._events`); a JSON
answer is the :class:`Completion` collected from it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Modality(enum.StrEnum):
    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"


class Health(enum.StrEnum):
    STARTING = "starting"  # not yet able to serve, expected to become ready
    READY = "ready"
    DOWN = "down"  # was or should be serving, cannot now
    DISABLED = "disabled"  # switched off in configuration


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """The most media one request may carry to a tier; None means no limit of the tier's own."""

    max_images: int | None = None
    max_image_pixels: int | None = None  # per image, after the gateway's resize
    max_video_seconds: float | None = None
    max_audio_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a tier's model accepts."""

    modalities: frozenset[Modality]
    max_context_tokens: int
    model: str  # the model name the engine reports
    limits: MediaLimits = field(default_factory=MediaLimits)
    # The model's declared quality level in [0, 1], compared by the router with a request's estimated
    # difficulty (a strong/weak threshold); set per model in configuration.
    quality: float = 0.5

    def accepts(self, needed: frozenset[Modality]) -> bool:
        return needed <= self.modalities


@dataclass(slots=True)
class TierState:
    """A snapshot of a tier for routing, readiness and operators."""

    name: str
    health: Health
    in_flight: int = 0
    queued: int = 0
    detail: str = ""
    instances: list[dict[str, Any]] = field(default_factory=list)  # replicas, for operators

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "health": self.health.value,
            "in_flight": self.in_flight,
            "queued": self.queued,
            "detail": self.detail,
        }
        if self.instances:
            out["instances"] = self.instances
        return out


@dataclass(slots=True)
class Generation:
    """One chat generation as a tier sees it.

    ``messages`` are OpenAI chat messages as plain JSON-able dicts; the
    gateway has already validated them.
    """

    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    request_id: str = ""
    # Predicted work in generated-token units (prompt tokens count a tenth); balancers and admission
    # lanes weigh requests by it.
    cost: float = 1.0
    # Requests sharing this key (a conversation) prefer the same instance, for its prefix cache.
    affinity: str | None = None
    tenant: str = ""  # who asked; admission may favour some tenants
    # The consumer takes the answer piece by piece (the client asked for a stream). When False a tier
    # may send the text in fewer, larger pieces if that is cheaper (the cloud pool then asks vLLM for
    # one JSON body: streaming costs the gateway ~3 µs per token to read).
    stream: bool = False


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    finish_reason: str
    usage: Usage
    model: str
    instance: str = ""  # which replica or engine instance served it
