"""bench/quality_sim.py's claims, on a small run: from the declared prior, a few labels per tenant
keep >= 90 % of the multi-step reasoning on the cloud and >= 80 % of the short facts on the edge, the
labels learned show in the model's report, and the curves are laid out as the docs read them."""

from __future__ import annotations

from bench import quality_sim


def test_the_simulated_deployment_meets_its_targets_with_a_hundred_labels() -> None:
    result = quality_sim.run(labels=100, seed=1, eval_per_class=30, check_every=50)
    after = result["after"]["cloud_share"]
    assert after["reasoning"] >= 0.9 and 1 - after["facts"] >= 0.8, after
    assert result["targets_met"] and result["labels_to_targets"] is not None
    labels = {(r["tenant"], r["tier"]): r["labels"] for r in result["report"]}
    assert all(sum(n for (t, _), n in labels.items() if t == tenant) >= 100 for tenant in quality_sim.TENANTS)
    curves = result["curves"]
    assert set(curves) == {"learned", "static_threshold", "random_mix"}
    ends = curves["random_mix"]
    assert (ends[0]["recovered"], ends[-1]["recovered"]) == (0.0, 1.0)
    assert all(0 <= p["cloud_share"] <= 1 for points in curves.values() for p in points)
