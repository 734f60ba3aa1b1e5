"""The tiers a gateway serves, by name, with their circuit breakers: what routing sees of them
(views), what clients may name (models), and what operators see (states)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import router
from gateway.errors import ModelNotFound
from gateway.pipeline.admission import Gates
from gateway.wire.chat_response import ModelCard, ModelList
from tiers import Tier, TierState

AUTO_MODEL = "tiergate-auto"


class TierSet:
    def __init__(
        self,
        tiers: Mapping[str, Tier],
        breakers: router.BreakerBoard | None = None,
        aliases: Mapping[str, tuple[str, str]] | None = None,
        remote: frozenset[str] = frozenset(),
        gates: Gates | None = None,
    ) -> None:
        """``aliases``: a model name clients may use → (the model it stands for, a routing strategy or "");
        ``remote``: the tiers configured with ``location = "remote"`` (residency rules); ``gates``:
        their admission gates (stage 7), whose waiters count as the tier's queue."""
        self.tiers = dict(tiers)
        self.aliases = dict(aliases or {})
        self.remote = remote
        self.breakers = breakers or router.BreakerBoard(router.BreakerConfig(enabled=False))
        self.gates = gates or Gates()
        self._created = int(time.time())

    def __getitem__(self, name: str) -> Tier:
        return self.tiers[name]

    @property
    def model_names(self) -> list[str]:
        """What a request's ``model`` may name: the router, one tier, or an alias of either."""
        return [AUTO_MODEL, *self.tiers, *self.aliases]

    def resolve(self, model: str) -> tuple[str, str]:
        """The model a request's name stands for (``tiergate-auto`` or a tier) and the routing
        strategy its alias sets ("" for none); an unknown name is a 404."""
        if model in self.tiers or model == AUTO_MODEL:
            return model, ""
        alias = self.aliases.get(model)
        if alias is None:
            shown = ", ".join(self.model_names)
            raise ModelNotFound(
                f"The model `{model[:256]}` does not exist; use one of: {shown}", param="model"
            )
        return alias

    def check_model(self, model: str) -> None:
        self.resolve(model)

    def models(self) -> ModelList:
        return ModelList([self.card(name) for name in self.model_names])

    def card(self, model: str) -> ModelCard:
        """``GET /v1/models/{model}``; an unknown name is a 404."""
        self.resolve(model)
        return ModelCard(model, self._created)

    def served_models(self) -> str:
        """Each tier's engine model, e.g. ``edge=smollm2,cloud=smolvlm``: part of every cache key, so
        an answer is never replayed after a tier's model changed."""
        return ",".join(f"{n}={t.capabilities.model}" for n, t in self.tiers.items())

    def state(self, name: str) -> TierState:
        """A tier's state, its admission queue counted in its queue."""
        state = self.tiers[name].state()
        state.queued += self.gates.waiting(name)
        return state

    def queued(self, name: str) -> int:
        """Requests waiting at tier ``name`` (its state's queue), 0 for a tier not configured."""
        return self.state(name).queued if name in self.tiers else 0

    def views(self) -> list[router.TierView]:
        """What the router sees of each tier now: capabilities, state, and its open breakers."""
        return [
            router.TierView(
                n, t.capabilities, self.state(n), self.breakers.open_modalities(n), local=n not in self.remote
            )
            for n, t in self.tiers.items()
        ]

    def states(self) -> list[dict[str, Any]]:
        return [self.state(name).as_dict() for name in self.tiers]

    def breaker_states(self) -> list[dict[str, str]]:
        """Every circuit breaker that has seen a call: tier, modality, state, last failure."""
        return [b.as_dict() for b in self.breakers.snapshot()]
