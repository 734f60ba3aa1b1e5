"""Several engine instances of one model version, each with its own worker thread and bounded queue.

An in-process engine runs one generation at a time, so a machine with the cores runs several instances
of the model (``edge.instances``).  A request goes to the least-loaded instance (running + waiting); among
equally loaded ones it prefers the instance that last served the same conversation (its prompt prefix is
still in that instance's context), then takes turns.  A stream stays on its instance to the end, and
closing it cancels the generation there.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import AsyncGenerator
from typing import Any

from tiers._errors import TierUnavailable
from tiers._events import Event
from tiers._types import Capabilities, Generation, Health, MediaLimits, Modality
from tiers.edge._batch import BatchedLlamaTier
from tiers.edge._config import EdgeConfig, EdgeModel
from tiers.edge._grammar import edge_abilities
from tiers.edge._llamacpp import LlamaCppTier
from tiers.edge._onnx import OnnxTier
from tiers.edge._serial import SerialEngineTier

# Conversations remembered per model version for instance affinity.
AFFINITY_ENTRIES = 4096


def capabilities_of(model: EdgeModel) -> Capabilities:
    limits = model.limits
    return Capabilities(
        modalities=frozenset(Modality(m) for m in model.modalities),
        max_context_tokens=model.context_tokens,
        model=model.name,
        limits=MediaLimits(
            max_images=limits.max_images,
            max_image_pixels=limits.max_image_pixels,
            max_video_seconds=limits.max_video_seconds,
            max_audio_seconds=limits.max_audio_seconds,
        ),
        quality=model.quality,
        abilities=edge_abilities(),
    )


class InstanceSet:
    """The engine instances of one model version, and the requests inside them (for a drain)."""

    def __init__(self, model: EdgeModel, config: EdgeConfig, tier: str = "edge") -> None:
        self._tier = tier
        self.model = model
        self.capabilities = capabilities_of(model)
        engine = config.for_model(model)
        kind: type[SerialEngineTier] = OnnxTier if model.backend == "onnx" else LlamaCppTier
        if kind is LlamaCppTier and engine.max_sequences > 1:
            kind = BatchedLlamaTier  # continuous batching (tiers/edge/_batch.py)
        self.instances: list[SerialEngineTier] = [
            kind(engine, instance=f"{model.name}/{i}") for i in range(config.instance_count())
        ]
        self._affinity: collections.OrderedDict[str, SerialEngineTier] = collections.OrderedDict()
        self._turn = itertools.count()
        self.active = 0  # requests inside this set now
        self._idle = asyncio.Event()
        self._idle.set()

    # -- life ------------------------------------------------------------------

    async def start(self) -> None:
        """Load and warm every instance (at once: each has its own thread)."""
        await asyncio.gather(*(i.start() for i in self.instances))

    async def aclose(self) -> None:
        await asyncio.gather(*(i.aclose() for i in self.instances), return_exceptions=True)

    async def drained(self) -> None:
        """Return once no request is inside (new ones no longer come once another version is active)."""
        await self._idle.wait()

    @property
    def health(self) -> Health:
        states = {i.health for i in self.instances}
        for health in (Health.READY, Health.STARTING, Health.DOWN):
            if health in states:
                return health
        return Health.DOWN

    @property
    def detail(self) -> str:
        """The first instance's words (all are alike), or the first failure's."""
        down = [i.state().detail for i in self.instances if i.health is Health.DOWN]
        first = self.instances[0].state().detail
        ready = sum(i.health is Health.READY for i in self.instances)
        if ready == len(self.instances):
            return f"{first}; {ready} instance{'s' if ready > 1 else ''}"
        return f"{ready}/{len(self.instances)} instances ready; {down[0] if down else first}"

    def instance_states(self) -> list[dict[str, Any]]:
        out = []
        for instance in self.instances:
            state = instance.state()
            out.append(
                {
                    "name": instance.instance,
                    "health": state.health.value,
                    "running": state.in_flight,
                    "queued": state.queued,
                    "device": instance.device,
                    "prefix_restores": instance.prefixes.hits,  # prompts that reused a saved state
                }
            )
        return out

    # -- requests --------------------------------------------------------------

    def pick(self, gen: Generation) -> SerialEngineTier:
        ready = [i for i in self.instances if i.health is Health.READY]
        if not ready:
            raise TierUnavailable(self._tier, self.detail)
        least = min(i.load for i in ready)
        candidates = [i for i in ready if i.load == least]
        chosen = self._affinity.get(gen.affinity) if gen.affinity else None
        if chosen not in candidates:
            chosen = candidates[next(self._turn) % len(candidates)]
        if gen.affinity:
            self._affinity[gen.affinity] = chosen
            self._affinity.move_to_end(gen.affinity)
            if len(self._affinity) > AFFINITY_ENTRIES:
                self._affinity.popitem(last=False)
        return chosen

    def _enter(self) -> None:
        self.active += 1
        self._idle.clear()

    def _leave(self) -> None:
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    async def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        self._enter()
        try:
            events = self.pick(gen).generate(gen)
            try:
                async for event in events:
                    yield event
            finally:
                await events.aclose()  # cancels the generation if unfinished
        finally:
            self._leave()
