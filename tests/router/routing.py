"""What the gateway does for each request, for the learner's tests: the learner's snapshot, the
pure decision, the work booked at the tier chosen."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import router

AUTO = "tiergate-auto"


def route(
    learner: router.Learner,
    model: str,
    views: Sequence[router.TierView],
    features: router.Features,
    policy: router.TenantPolicy = router.DEFAULT_POLICY,
    spend: router.Spend | None = None,
) -> router.Decision:
    """Route a request for ``model`` (``tiergate-auto`` or a tier's name)."""
    features = dataclasses.replace(features, pinned=None if model == AUTO else model)
    snapshot = learner.snapshot(features, views, policy, spend)
    decision = router.Router().decide(features, views, policy, snapshot)
    learner.routed(decision)
    return decision
