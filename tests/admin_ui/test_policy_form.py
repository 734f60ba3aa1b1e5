"""The policy editor's form: a policy survives the round trip through the form's values, and
what cannot be a policy is reported at the field it came from."""

from __future__ import annotations

import pytest

import router
from admin_ui import _policy_form as form
from tiers import Modality

TIERS = ["cloud", "edge"]


def test_a_policy_round_trips_through_the_form() -> None:
    policy = router.TenantPolicy(
        strategy="always:edge",
        latency=router.LatencyObjective(ttft_ms=300.0, total_ms=None, percentile=99.0),
        budget=router.Budget(amount_usd=12.5, period="day", on_exhausted="refuse"),
        preferred_tier="edge",
        quality_floor=0.4,
        modality_rules={Modality.VIDEO: "cloud"},
        cache=False,
        semantic_cache=router.SemanticCachePolicy(enabled=True, threshold=0.9, allow_sampling=True),
        degrade="fail",
        acceptable_floor=0.85,
        shadow=router.ShadowPolicy(enabled=True, rate=0.1, budget_usd=2.5, reference="cloud", threshold=0.7),
        residency=[
            router.ResidencyRule(detector="iban", action="keep_local"),
            router.ResidencyRule(detector="pattern", action="redact", pattern=r"PRJ-\d+", name="project"),
        ],
        tag_budgets=(
            router.TagBudget(tag="team=search", amount_usd=10.0),
            router.TagBudget(tag="feature=chat bot", amount_usd=2.5, period="day"),
        ),
    )
    values = form.flatten(policy)
    assert values["tag_budgets"] == "team=search 10 month\nfeature=chat bot 2.5 day"
    assert values["latency.ttft_ms"] == "300" and values["latency.total_ms"] == "" and values["cache"] == ""
    body, errors = form.parse(values, TIERS)
    assert errors == {}
    assert form.to_policy(body) == policy


def test_a_strategy_stored_by_its_older_name_is_shown_by_its_current_one() -> None:
    (_, routing), *_ = form.fields(TIERS)
    choices = [value for value, _ in routing[0].choices]
    assert choices == ["learned", "always:cloud", "always:edge", "round-robin", "rule"]
    older = router.TenantPolicy(strategy="always-edge")
    assert form.flatten(older)["strategy"] == "always:edge"
    assert form.changes(older, router.TenantPolicy(strategy="always:edge")) == ["no change"]


def test_text_that_is_no_number_is_reported_at_its_field() -> None:
    values = form.flatten(router.TenantPolicy()) | {"quality_floor": "high", "budget.amount_usd": "1,5"}
    _, errors = form.parse(values, TIERS)
    assert errors == {"quality_floor": "a number", "budget.amount_usd": "a number"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("latency.percentile", "20"),
        ("quality_floor", "1.5"),
        ("latency.total_ms", "-5"),
        ("budget.period", "year"),
        ("semantic_cache.threshold", "0"),
        ("semantic_cache.threshold", "1.2"),
    ],
)
def test_out_of_range_values_name_their_field(field: str, value: str) -> None:
    values = form.flatten(router.TenantPolicy()) | {field: value}
    body, errors = form.parse(values, TIERS)
    assert errors == {}
    with pytest.raises(router.PolicyInvalid) as caught:
        form.to_policy(body)
    assert caught.value.field == field


def test_changes_list_each_field_that_moved() -> None:
    before = router.TenantPolicy()
    after = router.TenantPolicy(cache=False, modality_rules={Modality.IMAGE: "cloud"})
    assert form.changes(before, after) == ["cache: on → off", "modality_rules.image: – → cloud"]
    assert form.changes(after, after) == ["no change"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("team=search", "line 1"),
        ("team=search ten", "line 1"),
        ("ok=1 1\nteam=search 1 month extra", "line 2"),
    ],
)
def test_a_tag_budget_line_that_is_not_tag_amount_period_is_reported_at_its_box(
    text: str, message: str
) -> None:
    values = form.flatten(router.TenantPolicy()) | {"tag_budgets": text}
    _, errors = form.parse(values, TIERS)
    assert message in errors["tag_budgets"]


def test_a_bad_tag_in_a_tag_budget_is_reported_at_its_box() -> None:
    body, errors = form.parse(form.flatten(router.TenantPolicy()) | {"tag_budgets": "team 5"}, TIERS)
    assert errors == {}
    with pytest.raises(router.PolicyInvalid) as caught:
        form.to_policy(body)
    assert caught.value.field == "tag_budgets"


def test_residency_rules_that_are_not_json_are_reported_at_their_field() -> None:
    values = form.flatten(router.TenantPolicy()) | {"residency": "[{detector: iban"}
    _, errors = form.parse(values, TIERS)
    assert errors["residency"].startswith("not JSON")


def test_the_semantic_cache_is_off_until_its_box_is_ticked() -> None:
    values = form.flatten(router.TenantPolicy())
    assert values["semantic_cache.enabled"] == "" and values["semantic_cache.threshold"] == "0.85"
    body, _ = form.parse(values | {"semantic_cache.enabled": "on", "semantic_cache.threshold": ""}, TIERS)
    policy = form.to_policy(body)
    assert policy.semantic_cache == router.SemanticCachePolicy(enabled=True)  # an empty threshold: 0.85
    assert form.changes(router.TenantPolicy(), policy) == ["semantic_cache.enabled: off → on"]
