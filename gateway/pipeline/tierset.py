"""The tiers a gateway serves, by name, with their circuit breakers: what routing sees of them
(views), what clients may name (models), and what operators see (states)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import router
from gateway.api.protocol import ModelCard, ModelList
from gateway.errors import ModelNotFound
from tiers import Tier

AUTO_MODEL = "tiergate-auto"


class TierSet:
    def __init__(self, tiers: Mapping[str, Tier], breakers: router.BreakerBoard | None = None) -> None:
        self.tiers = dict(tiers)
        self.breakers = breakers or router.BreakerBoard(router.BreakerConfig(enabled=False))
        self._created = int(time.time())

    def __getitem__(self, name: str) -> Tier:
        return self.tiers[name]

    @property
    def model_names(self) -> list[str]:
        """What a request's ``model`` may name: the router, or one tier."""
        return [AUTO_MODEL, *self.tiers]

    def check_model(self, model: str) -> None:
        if model not in self.tiers and model != AUTO_MODEL:
            raise ModelNotFound(
                f"the model {model!r} does not exist; use one of: {', '.join(self.model_names)}",
                param="model",
            )

    def models(self) -> ModelList:
        return ModelList([ModelCard(name, self._created) for name in self.model_names])

    def served_models(self) -> str:
        """Each tier's engine model, e.g. ``edge=smollm2,cloud=smolvlm``: part of every cache key, so
        an answer is never replayed after a tier's model changed."""
        return ",".join(f"{n}={t.capabilities.model}" for n, t in self.tiers.items())

    def views(self) -> list[router.TierView]:
        """What the router sees of each tier now: capabilities, state, and its open breakers."""
        return [
            router.TierView(n, t.capabilities, t.state(), self.breakers.open_modalities(n))
            for n, t in self.tiers.items()
        ]

    def states(self) -> list[dict[str, Any]]:
        return [tier.state().as_dict() for tier in self.tiers.values()]

    def breaker_states(self) -> list[dict[str, str]]:
        """Every circuit breaker that has seen a call: tier, modality, state, last failure."""
        return [b.as_dict() for b in self.breakers.snapshot()]
