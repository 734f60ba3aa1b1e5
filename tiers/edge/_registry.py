"""The edge model registry: the versions the edge may serve, one active, hot swap and rollback.

Every version is a GGUF or ONNX model by path with what it declares (modalities, context, quality level,
media limits).  The active version's instances are loaded and warmed at start.  Activating another
version loads and warms its instances while the current one keeps serving; then new requests go to the
new one, requests already inside the old one finish there, and the old one is closed once it is empty.
Nothing is dropped.  Rollback activates the version that was active before, the same way.

Versions come from the settings (``edge.models``) or are registered at run time (the admin API), which
lasts until the gateway stops.  The registry is the edge's :class:`~tiers.ModelRegistry`; its errors are
:class:`~tiers.RegistryError`'s.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import msgspec

from tiers._errors import InvalidModel, NothingToRollBack, UnknownModel
from tiers._events import EventStream
from tiers._types import Capabilities, Generation, Health, TierState
from tiers.edge._batch import BatchedLlamaTier
from tiers.edge._config import EdgeConfig, EdgeModel
from tiers.edge._instances import InstanceSet
from tiers.edge._llamacpp import shipped_model_path
from tiers.edge._onnx import FP32_FILE, INT8_FILE
from tiers.edge._serial import SerialEngineTier

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"


def check_files(model: EdgeModel, config: EdgeConfig) -> None:
    """Raise :class:`InvalidModel` unless the version's files are there and look like what it says."""
    engine = config.for_model(model)
    if model.backend == "llamacpp":
        path = Path(engine.model_path).expanduser() if engine.model_path else shipped_model_path()
        if not path.is_file():
            raise InvalidModel(f"{model.name}: {path} is not a file")
        with path.open("rb") as f:
            if f.read(4) != GGUF_MAGIC:
                raise InvalidModel(f"{model.name}: {path} is not a GGUF file")
        return
    folder = Path(engine.onnx_model_dir).expanduser()
    graph = folder / (INT8_FILE if model.quantized else FP32_FILE)
    missing = [p.name for p in (folder / "decoder.json", folder / "tokenizer.json", graph) if not p.exists()]
    if missing:
        raise InvalidModel(
            f"{model.name}: {folder} lacks {', '.join(missing)} (make it with tiergate models export-onnx)"
        )


class EdgeRegistry:
    """The edge :class:`~tiers.Tier`: the active version's instances, behind a registry of versions
    (a :class:`~tiers.ModelRegistry` of :class:`EdgeModel`)."""

    def __init__(self, config: EdgeConfig, name: str = "edge") -> None:
        self.name = name  # the tier's name in configuration (clients pin it by this name)
        self._config = config
        self._models = {m.name: m for m in config.model_specs()}
        first = config.active or next(iter(self._models))
        self._active = InstanceSet(self._models[first], config, name)
        self._history = [first]  # activated versions, the current one last
        self._retiring: list[InstanceSet] = []
        self._closers: set[asyncio.Task[None]] = set()
        self._swap = asyncio.Lock()

    # -- the Tier interface -----------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return self._active.capabilities

    @property
    def concurrency(self) -> int:
        """How many requests it works on at once (admission's slots for the edge)."""
        return sum(i.slots for i in self._active.instances)

    def slowdown_at(self, width: int) -> float:
        """How many times longer a request holds its slot beside ``width - 1`` others than alone
        (admission's service rate at a width): a batch's measured slowdown, the width shared
        among the instances (the balancer spreads it), at most their slots; 1 for serial ones."""
        instances = self._active.instances
        each = -(-width // max(len(instances), 1))
        return min(
            (
                i.sustained.slowdown(min(each, i.slots)) if isinstance(i, BatchedLlamaTier) else 1.0
                for i in instances
            ),
            default=1.0,
        )

    def state(self) -> TierState:
        sets = [self._active, *self._retiring]
        engines = [i.state() for s in sets for i in s.instances]
        detail = self._active.detail
        if self._retiring:
            detail += f"; finishing on {', '.join(s.model.name for s in self._retiring)}"
        return TierState(
            self.name,
            self._active.health,
            in_flight=sum(e.in_flight for e in engines),
            queued=sum(e.queued for e in engines),
            detail=detail,
            slots=self.concurrency,
            # The balancer sends it to the least loaded instance: the least slowed.
            slowdown=min((e.slowdown for e in engines), default=1.0),
            device=", ".join(sorted({i.device for i in self._active.instances})),
            # the slowest instance's timed warm-up (they run alike; the router's prior errs slow)
            tokens_per_s=min((i.speed[0] for i in self._active.instances if i.speed[0]), default=0.0),
            first_token_s=max((i.speed[1] for i in self._active.instances), default=0.0),
        )

    async def start(self) -> None:
        await self._active.start()

    async def aclose(self) -> None:
        for task in list(self._closers):
            task.cancel()
        await asyncio.gather(
            *(s.aclose() for s in [self._active, *self._retiring]), *self._closers, return_exceptions=True
        )

    def generate(self, gen: Generation) -> EventStream:
        # The version active now serves it to the end. Callers iterate at once (no await between), and
        # the set counts the request from its first step, so a swap cannot close the set under it.
        return self._active.generate(gen)

    # -- the registry -------------------------------------------------------------

    @property
    def instances(self) -> list[SerialEngineTier]:
        """The active version's engine instances."""
        return list(self._active.instances)

    @property
    def active(self) -> str:
        return self._active.model.name

    def models(self) -> dict[str, Any]:
        """Every version with its declarations and status, the active one's instances, what rollback
        would go back to."""
        retiring = {s.model.name: s for s in self._retiring}
        out = []
        for name, model in self._models.items():
            entry = msgspec.to_builtins(model)
            if name == self.active:
                entry["status"] = "active"
                entry["instances"] = self._active.instance_states()
            elif name in retiring:
                entry["status"] = "draining"
                entry["instances"] = retiring[name].instance_states()
            else:
                entry["status"] = "available"
            out.append(entry)
        previous = self._history[-2] if len(self._history) > 1 else None
        return {"active": self.active, "previous": previous, "health": self._active.health.value, "data": out}

    def register(self, model: EdgeModel) -> None:
        """Add a version (not yet active); its files must be there."""
        if model.name in self._models:
            if self._models[model.name] == model:
                return
            raise InvalidModel(f"a different version named {model.name!r} is registered; choose a new name")
        check_files(model, self._config)
        self._models[model.name] = model
        log.info("edge: version %s registered (%s, %s)", model.name, model.backend, model.path or "default")

    async def activate(self, name: str) -> None:
        """Make ``name`` the active version without dropping a request (see the module's words)."""
        async with self._swap:
            if await self._switch_to(name):
                self._history.append(name)

    async def rollback(self) -> str:
        """Go back to the version active before the current one; returns its name."""
        async with self._swap:
            if len(self._history) < 2:
                raise NothingToRollBack(f"{self.active} is the first version served: nothing to roll back to")
            previous = self._history[-2]
            await self._switch_to(previous)
            self._history.pop()
            return previous

    async def _switch_to(self, name: str) -> bool:
        model = self._models.get(name)
        if model is None:
            raise UnknownModel(f"no edge model named {name!r}; registered: {', '.join(self._models)}")
        if name == self.active:
            return False
        check_files(model, self._config)
        fresh = InstanceSet(model, self._config, self.name)
        await fresh.start()
        if fresh.health is not Health.READY:
            detail = fresh.detail
            await fresh.aclose()
            raise InvalidModel(f"{name} did not load ({detail}); still serving {self.active}")
        old, self._active = self._active, fresh
        log.info("edge: now serving %s; %s finishes its %d request(s)", name, old.model.name, old.active)
        self._retiring.append(old)
        task = asyncio.create_task(self._retire(old))
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)
        return True

    async def _retire(self, old: InstanceSet) -> None:
        try:
            await old.drained()
        finally:
            await old.aclose()
            self._retiring.remove(old)
            log.info("edge: %s closed", old.model.name)
