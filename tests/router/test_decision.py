from __future__ import annotations

import dataclasses

import pytest

import router
from tiers import ALL_ABILITIES, Ability, Capabilities, Health, Modality, TierState

TEXT = frozenset({Modality.TEXT})
RULE = router.AutoRule(edge_max_prompt_tokens=100, edge_max_output_tokens=50)
ROUTER = router.Router(RULE)
RULE_ONLY = router.TenantPolicy(strategy="rule")


def view(name: str, health: Health = Health.READY, context: int = 2048, modalities=TEXT) -> router.TierView:
    return router.TierView(name, Capabilities(modalities, context, f"{name}-model"), TierState(name, health))


def features(
    prompt: int = 10, max_tokens: int | None = 20, modalities=TEXT, pinned: str | None = None
) -> router.Features:
    return router.Features(prompt, max_tokens, 1, modalities, False, pinned=pinned)


def decide(views: list[router.TierView], f: router.Features) -> router.Decision:
    """Routing by the rule alone, as the gateway does without a learner."""
    return ROUTER.decide(f, views, RULE_ONLY)


BOTH = [view("edge"), view("cloud")]


def test_small_request_goes_to_edge_with_cloud_as_fallback() -> None:
    decision = decide(BOTH, features())
    assert decision.tier == "edge"
    assert decision.fallbacks == ("cloud",)
    assert "prompt ~10 <= 100" in str(decision.reason)


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "why"),
    [(101, 20, "prompt ~101 > 100"), (10, 51, "max_tokens 51 > 50"), (10, None, "max_tokens not set")],
)
def test_large_or_open_ended_request_goes_to_cloud(prompt: int, max_tokens: int | None, why: str) -> None:
    decision = decide(BOTH, features(prompt, max_tokens))
    assert decision.tier == "cloud"
    assert decision.fallbacks == ("edge",)
    assert why in str(decision.reason)


def test_when_cloud_is_starting_the_edge_serves_and_says_why() -> None:
    views = [view("edge"), view("cloud", Health.STARTING)]
    decision = decide(views, features(500, 100))
    assert decision.tier == "edge"
    assert str(decision.reason) == "edge: cloud is starting"


def test_request_larger_than_a_context_skips_that_tier() -> None:
    views = [view("edge", context=512), view("cloud", Health.DOWN)]
    with pytest.raises(router.NoTierAvailable, match="edge context is 512 tokens") as caught:
        decide(views, features(600, 10))
    assert not isinstance(caught.value, router.RequestDoesNotFit)  # the cloud could, once it is up


def test_request_no_tier_could_ever_take_is_told_so() -> None:
    views = [view("edge", context=512), view("cloud", Health.DOWN, context=1024)]
    with pytest.raises(router.RequestDoesNotFit):
        decide(views, features(2000, 10))


def test_pinned_tier_never_moves() -> None:
    views = [view("edge", Health.DOWN), view("cloud")]
    with pytest.raises(router.NoTierAvailable, match="edge is down"):
        decide(views, features(pinned="edge"))
    decision = decide(views, features(pinned="cloud"))
    assert (decision.tier, decision.fallbacks, str(decision.reason)) == (
        "cloud",
        (),
        "cloud: pinned by model name",
    )
    assert decision.reason.kind is router.ReasonKind.PINNED and decision.strategy == "pinned"


def test_modality_the_edge_lacks_goes_to_a_tier_that_has_it() -> None:
    image = frozenset({Modality.TEXT, Modality.IMAGE})
    views = [view("edge"), view("cloud", modalities=image)]
    decision = decide(views, features(modalities=image))
    assert decision.tier == "cloud"
    assert decision.fallbacks == ()
    assert str(decision.reason) == "cloud: edge does not accept image"


def test_no_tier_at_all_says_why_for_each() -> None:
    views = [view("edge", Health.DOWN), view("cloud", Health.STARTING)]
    with pytest.raises(router.NoTierAvailable, match="edge is down; cloud is starting"):
        decide(views, features())


def open_view(name: str, modalities, open_breakers) -> router.TierView:
    return router.TierView(
        name,
        Capabilities(modalities, 2048, f"{name}-model"),
        TierState(name, Health.READY),
        frozenset(open_breakers),
    )


IMAGE = frozenset({Modality.TEXT, Modality.IMAGE})


def test_open_image_breaker_removes_the_tier_for_image_requests_only() -> None:
    views = [view("edge"), open_view("cloud", IMAGE, {Modality.IMAGE})]
    with pytest.raises(router.NoTierAvailable, match="cloud image breaker is open"):
        decide(views, features(modalities=IMAGE))
    assert decide(views, features(max_tokens=None, pinned="cloud")).tier == "cloud"
    assert router.to_degrade(views, features(modalities=IMAGE)) == {Modality.IMAGE}
    assert router.to_degrade(views, features()) == frozenset()


def test_no_degradation_while_a_tier_with_a_closed_breaker_takes_the_modality() -> None:
    views = [open_view("edge", IMAGE, {Modality.IMAGE}), open_view("cloud", IMAGE, set())]
    assert router.to_degrade(views, features(modalities=IMAGE)) == frozenset()
    assert router.to_degrade(views, features(modalities=IMAGE, pinned="edge")) == {Modality.IMAGE}
    assert decide(views, features(modalities=IMAGE)).tier == "cloud"


def test_a_modality_no_tier_accepts_is_not_degraded_but_does_not_fit() -> None:
    views = [view("edge"), view("cloud")]
    assert router.to_degrade(views, features(modalities=IMAGE)) == frozenset()


def test_what_the_gateway_adds_to_a_reason_is_typed_and_rendered() -> None:
    views = [view("edge"), open_view("cloud", IMAGE, set())]
    reason = decide(views, features()).reason
    degraded = reason.removing({Modality.VIDEO, Modality.IMAGE})
    assert (
        str(degraded)
        == "edge: prompt ~10 <= 100 tokens, max_tokens 20 <= 50; image, video removed: breaker open"
    )
    assert degraded.kind is router.ReasonKind.SIZE and degraded.removed == (Modality.IMAGE, Modality.VIDEO)
    moved = degraded.failed_over("cloud", "edge is unavailable: connection refused")
    assert str(moved) == "cloud: edge is unavailable: connection refused, failed over"
    assert moved.kind is router.ReasonKind.FAILOVER and moved.cause == reason.cause


def test_an_ability_the_edge_lacks_sends_the_request_where_it_is_and_says_so() -> None:
    """A request with tools, where the edge declares none: the cloud serves, the reason names why; a
    request pinned to the edge is refused naming what it lacks, as a request that does not fit."""
    without_tools = Capabilities(TEXT, 2048, "edge-model", abilities=ALL_ABILITIES - {Ability.TOOLS})
    views = [router.TierView("edge", without_tools, TierState("edge", Health.READY)), view("cloud")]
    needs = dataclasses.replace(features(), needs=frozenset({Ability.TOOLS}))
    decision = decide(views, needs)
    assert (decision.tier, decision.fallbacks) == ("cloud", ())
    assert str(decision.reason) == "cloud: edge cannot honour tools"
    assert decision.reason.kind is router.ReasonKind.CAPABILITY
    with pytest.raises(router.RequestDoesNotFit) as refused:
        decide(views, dataclasses.replace(needs, pinned="edge"))
    assert [type(e) for e in refused.value.exclusions] == [router.Lacks]
