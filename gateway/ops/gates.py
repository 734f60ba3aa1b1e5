"""What operations read of admission: the lanes, and a tier's gate as figures.

Admission (``gateway.pipeline.admission``) puts each tier behind a gate with fast and slow lanes; the
metrics hook and the scaling signal read its figures (slots, waiters and bound per lane, arrivals)
through the protocol here (the gates are handed to them by the composition root), so ``ops/`` stands
below the pipeline and never imports it.
"""

from __future__ import annotations

import enum
from typing import Protocol


class Lane(enum.StrEnum):
    FAST = "fast"
    SLOW = "slow"


class GateFigures(Protocol):
    """A gate's figures, as admission's ``Gate`` keeps them."""

    @property
    def slots(self) -> int: ...

    @property
    def arrivals(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    def waiting_in(self, lane: Lane) -> int: ...

    def bound(self, lane: Lane) -> int: ...
