"""The metrics API other parts call: families present, counts right, label values bounded."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gateway.ops.metrics import MAX_VALUES_PER_LABEL, Metrics, tenant_class


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return samples(metrics).get((name, tuple(sorted(labels.items()))), 0.0)


def test_the_api_for_preprocessing_router_and_predictor_records_what_it_is_given() -> None:
    m = Metrics()
    m.preprocess_observed("image_decode", 0.002)
    m.preprocess_observed("image_decode", 0.004)
    m.preprocess_observed("image_resize", 0.001)
    m.preprocess_observed("not-a-stage", 0.5)
    m.media_cache_lookup(hit=True)
    m.media_cache_lookup(hit=False)
    m.media_cache_lookup(hit=False)
    m.route_decided("learned", "edge", "slo")
    m.route_decided("learned", "edge", "slo")
    m.route_decided("rule", "cloud", "size")
    m.predictor_error("edge", predicted=1.1, actual=1.0)
    m.predictor_error("edge", predicted=0.5, actual=1.0)
    m.predictor_error("edge", predicted=3.0, actual=0.0)  # no actual: nothing to compare with
    m.generated("edge", 40, 2.0)

    assert value(m, "tiergate_preprocess_seconds_count", stage="image_decode") == 2
    assert abs(value(m, "tiergate_preprocess_seconds_sum", stage="image_decode") - 0.006) < 1e-9
    assert value(m, "tiergate_preprocess_seconds_count", stage="image_resize") == 1
    assert value(m, "tiergate_preprocess_seconds_count", stage="other") == 1
    assert value(m, "tiergate_media_cache_requests_total", result="hit") == 1
    assert value(m, "tiergate_media_cache_requests_total", result="miss") == 2
    assert (
        value(m, "tiergate_route_decisions_total", strategy="learned", tier="edge", reason_class="slo") == 2
    )
    assert value(m, "tiergate_route_decisions_total", strategy="rule", tier="cloud", reason_class="size") == 1
    ape = "tiergate_predictor_absolute_percentage_error"
    assert value(m, f"{ape}_count", tier="edge", target="latency") == 2
    assert abs(value(m, f"{ape}_sum", tier="edge", target="latency") - 0.6) < 1e-9
    # 0.1 falls in the 0.1 bucket, 0.5 in 0.5: the MAPE-under-15% share is readable from buckets
    assert value(m, f"{ape}_bucket", tier="edge", target="latency", le="0.15") == 1
    assert value(m, "tiergate_generated_tokens_total", tier="edge") == 40
    assert value(m, "tiergate_generation_tokens_per_second_sum", tier="edge") == 20


def test_free_label_values_are_capped_so_series_stay_bounded() -> None:
    m = Metrics()
    for i in range(MAX_VALUES_PER_LABEL + 50):
        m.route_decided("rule", "cloud", f"reason-{i}")
    classes = {
        dict(labels)["reason_class"]
        for (name, labels) in samples(m)
        if name == "tiergate_route_decisions_total"
    }
    assert len(classes) == MAX_VALUES_PER_LABEL + 1
    assert "other" in classes
    assert (
        value(m, "tiergate_route_decisions_total", strategy="rule", tier="cloud", reason_class="other") == 50
    )


def test_requests_are_counted_by_route_tenant_class_tier_model_and_status() -> None:
    m = Metrics()
    for _ in range(3):
        m.request_done("/v1/chat/completions", "standard", "edge", "tiergate-auto", 200, 0.01)
    m.request_done("/v1/chat/completions", "acme", "none", "edge", 429, 0.001)
    m.request_done("unmatched", "none", "none", "none", 404, None)
    labels = {
        "route": "/v1/chat/completions",
        "tenant_class": "standard",
        "tier": "edge",
        "model": "tiergate-auto",
    }
    assert value(m, "tiergate_requests_total", **labels, status="200") == 3
    assert value(m, "tiergate_request_duration_seconds_count", **labels, status="200") == 3
    assert (
        value(
            m,
            "tiergate_requests_total",
            route="unmatched",
            tenant_class="none",
            tier="none",
            model="none",
            status="404",
        )
        == 1
    )


def test_tenants_are_labelled_by_name_only_when_the_operator_listed_them() -> None:
    named, priority = frozenset({"acme"}), frozenset({"vip"})
    assert tenant_class("acme", named, priority) == "acme"
    assert tenant_class("vip", named, priority) == "priority"
    assert tenant_class("tg_abc123_secret", named, priority) == "standard"


def test_scrape_hooks_set_live_gauges_before_rendering() -> None:
    m = Metrics()
    backlog = [7]
    m.on_scrape(lambda metrics: metrics.ledger_backlog.set(backlog[0]))
    assert value(m, "tiergate_ledger_backlog_rows") == 7
    backlog[0] = 2
    assert value(m, "tiergate_ledger_backlog_rows") == 2


def test_metrics_turned_off_record_nothing_and_render_empty() -> None:
    m = Metrics(enabled=False)
    m.request_done("/v1/chat/completions", "standard", "edge", "edge", 200, 0.01)
    m.route_decided("rule", "edge", "size")
    m.tier("edge").latency.observe(1.0)
    m.breaker_transitions.labels("edge", "text", "open").inc()
    m.ledger_written(0.001)
    assert m.render() == b""


def test_the_bisecting_histogram_counts_exactly_as_the_library_does() -> None:
    from prometheus_client import CollectorRegistry, Histogram

    from gateway.ops.metric_families import BisectHistogram

    buckets = (0.001, 0.01, 0.1, 1, 10)
    values = [0.0, 0.0005, 0.001, 0.0010001, 0.01, 0.05, 0.1, 1, 9.99, 10, 10.5, 1e9, -3.0]
    samples = []
    for kind in (Histogram, BisectHistogram):
        registry = CollectorRegistry()
        family = kind("h", "h", ["tier"], registry=registry, buckets=buckets)
        child = family.labels("edge")
        for v in values:
            child.observe(v)
        child.observe(0.5, {"trace_id": "abc"})  # an exemplar takes the library's own path
        samples.append(
            [
                (s.name, s.labels, s.value)
                for m in registry.collect()
                for s in m.samples
                if "created" not in s.name
            ]
        )
    assert samples[0] == samples[1]
    assert ("h_bucket", {"tier": "edge", "le": "0.001"}, 4.0) in samples[1]  # 0, 0.0005, 0.001 and -3
