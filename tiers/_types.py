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


class Ability(enum.StrEnum):
    """What a tier can do for a request beyond plain text; the router sends a request that needs
    one only to tiers that have it (a request pinned to one without it is a 400 naming it)."""

    TOOLS = "tools"  # function tools and tool_choice (none, auto, required, a named function)
    JSON_OBJECT = "json_object"  # response_format json_object
    JSON_SCHEMA = "json_schema"  # response_format json_schema
    LOGPROBS = "logprobs"  # logprobs and top_logprobs
    CHOICES = "n"  # n > 1 answers to one request
    LOGIT_BIAS = "logit_bias"


ALL_ABILITIES = frozenset(Ability)


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
    abilities: frozenset[Ability] = ALL_ABILITIES

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
    # Requests it serves at once now, when the tier measures it (a batching edge: what its batch
    # sustains, tiers._slots); 0: not said (the router learns it from the most in_flight it saw).
    slots: int = 0
    # How many times longer each generated token of a request sent now takes than alone, as the
    # tier measured it: a batching edge decodes it with the sequences running (tiers._slots).
    slowdown: float = 1.0
    # Where it runs, for operators (/readyz, the admin page): "cpu", "cuda:0 (NVIDIA H200)"; "": not said.
    device: str = ""
    # Its speed for one request alone, as it timed itself at load (an edge engine's warm-up answer):
    # the router's latency prior for the tier until it has fitted its own (0: not measured).
    tokens_per_s: float = 0.0
    first_token_s: float = 0.0
    # A hosted provider tier's account, for operators: whether its key is set, the rate-limit headroom
    # the provider last reported (requests, tokens, reset_s). Never the key itself.
    provider: dict[str, Any] = field(default_factory=dict)

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
        if self.slots:
            out["slots"] = self.slots
        if self.slowdown != 1.0:
            out["slowdown"] = round(self.slowdown, 3)
        if self.device:
            out["device"] = self.device
        if self.tokens_per_s:
            out["tokens_per_s"] = round(self.tokens_per_s, 1)
        if self.provider:
            out["provider"] = self.provider
        return out


@dataclass(slots=True)
class Generation:
    """One chat generation as a tier sees it.

    ``messages`` are OpenAI chat messages as plain JSON-able dicts; the
    gateway has already validated them.
    """

    messages: list[dict[str, Any]]
    # Legacy completions: the text the model continues, as it is (no chat template); ``messages``
    # then hold it as one user turn. None: a chat generation.
    prompt: str | None = None
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
    # -- what OpenAI's Chat Completions add (plain JSON as the client sent it, validated) --
    # Function tools: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}].
    tools: list[dict[str, Any]] = field(default_factory=list)
    # "none", "auto", "required", or {"type": "function", "function": {"name": ...}}; None: "auto"
    # when there are tools.
    tool_choice: str | dict[str, Any] | None = None
    # Several calls in one answer: True or False as the client said; None when it did not (OpenAI's
    # default is True; a tier may make one call then, as the edge does: a small model told it may
    # call again tends to repeat calls until max_tokens).
    parallel_tool_calls: bool | None = None
    # {"type": "json_object"} or {"type": "json_schema", "json_schema": {"name", "schema", "strict"}};
    # None for plain text.
    response_format: dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int = 0  # alternatives per token, with logprobs
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> bias in [-100, 100]
    n: int = 1  # answers to sample (choices 0 .. n-1)
    # vLLM's sampling extras, honoured by every tier (None / default: the engine's own default).
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    stop_token_ids: list[int] = field(default_factory=list)
    # OpenAI's reasoning_effort, for an engine whose chat template takes it (vLLM hands it to the
    # template, as its own server does); a model that does not reason answers the same without it.
    reasoning_effort: str | None = None
    # Prompt-cache breakpoints the client marked (Anthropic's cache_control), for a provider whose
    # cache takes them (Anthropic): {"at": "message", "index": i, "part": j (-1: the message as a
    # whole), "cache_control": {...}}, {"at": "tool", "index": i, ...} or {"at": "request", ...}.
    # Other tiers' engines cache prefixes without marks.
    cache_marks: list[dict[str, Any]] = field(default_factory=list)
    # OpenAI's prompt_cache_key: requests sharing it are routed to the same prompt cache at a
    # provider that has one (hosted OpenAI); other tiers have their own prefix caches and ignore it.
    prompt_cache_key: str | None = None
    # Work that must not slow anyone else's (a batch line): an engine shared with live requests gives
    # it only what they leave (the llama.cpp edge evaluates its prompt in small steps and does not
    # keep its tokens as a prefix in place of a live request's).
    background: bool = False

    @property
    def tool_mode(self) -> str:
        """How tools may be used: "none", "auto", "required" or "named" (see :attr:`forced_tool`)."""
        if not self.tools or self.tool_choice == "none":
            return "none"
        if isinstance(self.tool_choice, dict):
            return "named"
        return self.tool_choice or "auto"

    @property
    def forced_tool(self) -> str | None:
        """The function a named tool_choice forces, else None."""
        if isinstance(self.tool_choice, dict):
            return str(self.tool_choice["function"]["name"])
        return None


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens served from a prefix cache (prompt_tokens_details)
    # Prompt tokens written to a provider's prompt cache (Anthropic's cache_creation_input_tokens),
    # billed at their own price; part of prompt_tokens, as cached_tokens are.
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
