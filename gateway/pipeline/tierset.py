"""The tiers a gateway serves, by name, with their circuit breakers: what routing sees of them
(views), what clients may name (models), and what operators see (states); and the catalogue of every
endpoint's models (:class:`Catalogue`), for the error naming one at an endpoint that does not serve it.

OpenAI answers a model of the wrong kind with its own words, not "does not exist":

    a non-chat model on /v1/chat/completions   404 invalid_request_error, param "model", code null:
        "This is not a chat model and thus not supported in the v1/chat/completions endpoint.
         Did you mean to use v1/completions?"
    a chat model on /v1/completions            404, "This is a chat model and not supported in the
        v1/completions endpoint. Did you mean to use v1/chat/completions?"  (tiergate's text tiers
        serve both, so that case does not arise here)
    a model that does not embed, /v1/embeddings  403 invalid_request_error, param and code null:
        "You are not allowed to generate embeddings from this model"

(as OpenAI's clients have reported them: e.g. github.com/Chanzhaoyu/chatgpt-web/issues/1428,
hegelai/prompttools#115, infiniflow/ragflow#1835).  For the Responses API, legacy completions, the
Messages API and the audio endpoints no wording of OpenAI's own is on record; they say the same as
chat, naming their endpoint and the one that serves the model.  An unknown name stays a 404
``model_not_found``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import router
from gateway.errors import GatewayError, ModelNotFound, WrongKindOfModel
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


Kind = Literal["chat", "embedding", "speech"]

# The endpoint each kind is served at, as OpenAI names them in these messages.
_SERVED_AT: dict[Kind, str] = {
    "chat": "v1/chat/completions",
    "embedding": "v1/embeddings",
    "speech": "v1/audio/transcriptions",
}
# An ``Incoming.endpoint`` (or a speech task's path) -> the kind it serves and its name in messages.
_ENDPOINTS: dict[str, tuple[Kind, str]] = {
    "chat": ("chat", "v1/chat/completions"),
    "completions": ("chat", "v1/completions"),
    "responses": ("chat", "v1/responses"),
    "messages": ("chat", "v1/messages"),
    "messages.count_tokens": ("chat", "v1/messages/count_tokens"),
    "embeddings": ("embedding", "v1/embeddings"),
    "transcriptions": ("speech", "v1/audio/transcriptions"),
    "translations": ("speech", "v1/audio/translations"),
}
_NOUN: dict[Kind, str] = {
    "chat": "a chat model",
    "embedding": "an embedding model",
    "speech": "a speech model",
}


class Catalogue:
    """The names of each kind of model, read when asked: a model not built (or turned off) lists none,
    as ``/v1/models`` lists none for it."""

    def __init__(self) -> None:
        self._names: dict[Kind, Callable[[], Iterable[str]]] = {}

    def add(self, kind: Kind, names: Callable[[], Iterable[str]]) -> None:
        self._names[kind] = names

    def kind_of(self, model: str) -> Kind | None:
        return next((kind for kind, names in self._names.items() if model in names()), None)

    def misplaced(self, model: str, endpoint: str) -> GatewayError | None:
        """OpenAI's error when ``model`` is of another kind than ``endpoint`` serves; None when it is
        of none (an unknown name: the caller's 404) or of the right one."""
        kind = self.kind_of(model)
        wanted, path = _ENDPOINTS[endpoint]
        if kind is None or kind == wanted:
            return None
        if wanted == "embedding":
            return WrongKindOfModel("You are not allowed to generate embeddings from this model", status=403)
        if endpoint == "chat":  # OpenAI's words, its suggestion included
            message = (
                "This is not a chat model and thus not supported in the v1/chat/completions endpoint. "
                "Did you mean to use v1/completions?"
            )
        elif wanted == "chat":
            message = f"This is not a chat model and thus not supported in the {path} endpoint."
        else:  # as OpenAI words a chat model on v1/completions
            message = f"This is {_NOUN[kind]} and not supported in the {path} endpoint."
        return WrongKindOfModel(
            f"{message} Did you mean to use {_SERVED_AT[kind]}?" if endpoint != "chat" else message,
            status=404,
            param="model",
        )
