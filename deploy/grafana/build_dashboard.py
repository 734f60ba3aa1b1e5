"""Writes ``deploy/grafana/tiergate.json``, the Grafana dashboard of tiergate's /metrics.

The panels are listed here as (title, unit, [(PromQL, legend)]) so the JSON stays reviewable;
``tests/test_dashboard.py`` checks that the file is what this script writes and that every
metric family the gateway exports appears in some panel.

    .venv/bin/python deploy/grafana/build_dashboard.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("tiergate.json")
CHAT = 'route="/v1/chat/completions"'
APE = "tiergate_predictor_absolute_percentage_error"


def q(quantile: float, bucket: str, by: str = "", where: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({quantile}, sum by ({group}) (rate({bucket}_bucket{{{where}}}[5m])))"


Panel = tuple[str, str, list[tuple[str, str]]]
ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Gateway",
        [
            (
                "Requests/s by route and status",
                "reqps",
                [("sum by (route, status) (rate(tiergate_requests_total[1m]))", "{{route}} {{status}}")],
            ),
            (
                "Chat latency (arrival to last byte)",
                "s",
                [
                    (q(p, "tiergate_request_duration_seconds", where=CHAT), f"p{int(p * 100)}")
                    for p in (0.5, 0.95, 0.99)
                ],
            ),
            (
                "Chat requests/s by tenant class, tier and model",
                "reqps",
                [
                    (
                        f"sum by (tenant_class, tier, model) (rate(tiergate_requests_total{{{CHAT}}}[5m]))",
                        "{{tenant_class}} {{tier}} {{model}}",
                    )
                ],
            ),
            (
                "429s by reason",
                "reqps",
                [("sum by (reason) (rate(tiergate_rate_limited_total[5m]))", "{{reason}}")],
            ),
            (
                "Timeouts and failovers",
                "reqps",
                [
                    ("sum by (tier) (rate(tiergate_timeouts_total[5m]))", "timeouts {{tier}}"),
                    (
                        "sum by (from_tier) (rate(tiergate_failovers_total[5m]))",
                        "failover from {{from_tier}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Admission",
        [
            (
                "Queue length and bound per lane",
                "short",
                [
                    ("tiergate_queue_length", "{{tier}} {{lane}} waiting"),
                    ("tiergate_queue_bound", "{{tier}} {{lane}} bound"),
                ],
            ),
            (
                "Queue wait p95 per lane",
                "s",
                [(q(0.95, "tiergate_queue_wait_seconds", "tier, lane"), "{{tier}} {{lane}}")],
            ),
        ],
    ),
    (
        "Tiers and replicas",
        [
            (
                "Tier latency p50 / p95",
                "s",
                [
                    (q(0.5, "tiergate_tier_latency_seconds", "tier"), "p50 {{tier}}"),
                    (q(0.95, "tiergate_tier_latency_seconds", "tier"), "p95 {{tier}}"),
                ],
            ),
            (
                "Time to first token p50 / p95",
                "s",
                [
                    (q(0.5, "tiergate_time_to_first_token_seconds", "tier"), "p50 {{tier}}"),
                    (q(0.95, "tiergate_time_to_first_token_seconds", "tier"), "p95 {{tier}}"),
                ],
            ),
            (
                "Tokens/s (edge model speed, pool throughput)",
                "short",
                [
                    (q(0.5, "tiergate_generation_tokens_per_second", "tier"), "per generation p50 {{tier}}"),
                    ("sum by (tier) (rate(tiergate_generated_tokens_total[1m]))", "generated/s {{tier}}"),
                ],
            ),
            (
                "Tier readiness, in flight, queued, slots (the edge's: what its batch sustains)",
                "short",
                [
                    ("tiergate_tier_ready", "ready {{tier}}"),
                    ("tiergate_tier_in_flight", "in flight {{tier}}"),
                    ("tiergate_tier_queued", "queued {{tier}}"),
                    ("tiergate_tier_slots", "slots {{tier}}"),
                ],
            ),
            (
                "Replica load (vLLM /metrics and the gateway's own)",
                "short",
                [
                    (
                        'tiergate_replica{signal=~"in_flight|vllm_waiting|vllm_running|kv_cache_usage"}',
                        "{{replica}} {{signal}}",
                    ),
                    ('tiergate_replica{signal=~"healthy|ejected|draining"}', "{{replica}} {{signal}}"),
                ],
            ),
        ],
    ),
    (
        "Preprocessing and caches",
        [
            (
                "Preprocessing p95 per stage",
                "s",
                [(q(0.95, "tiergate_preprocess_seconds", "stage"), "{{stage}}")],
            ),
            (
                "Media parts per second, by kind",
                "reqps",
                [("sum by (kind) (rate(tiergate_media_parts_total[5m]))", "{{kind}}")],
            ),
            (
                "Media cache hit ratio",
                "percentunit",
                [
                    (
                        'sum(rate(tiergate_media_cache_requests_total{result="hit"}[5m])) / '
                        "sum(rate(tiergate_media_cache_requests_total[5m]))",
                        "hit ratio",
                    )
                ],
            ),
            (
                "Result cache: hit ratio, lookups, errors",
                "short",
                [
                    (
                        'sum(rate(tiergate_cache_requests_total{result=~"hit|semantic"}[5m])) / '
                        'sum(rate(tiergate_cache_requests_total{result=~"hit|semantic|miss"}[5m]))',
                        "hit ratio (exact + semantic)",
                    ),
                    (
                        'sum(rate(tiergate_cache_requests_total{result="semantic"}[5m])) / '
                        'sum(rate(tiergate_cache_requests_total{result=~"hit|semantic|miss"}[5m]))',
                        "semantic hit ratio",
                    ),
                    ("sum by (result) (rate(tiergate_cache_requests_total[5m]))", "{{result}}/s"),
                    ("sum by (op) (rate(tiergate_cache_errors_total[5m]))", "errors {{op}}/s"),
                ],
            ),
            (
                "Result cache lookup p50 / p99",
                "s",
                [
                    (q(0.5, "tiergate_cache_lookup_seconds"), "p50"),
                    (q(0.99, "tiergate_cache_lookup_seconds"), "p99"),
                ],
            ),
        ],
    ),
    (
        "Routing",
        [
            (
                "Route decisions by strategy, tier and reason class",
                "reqps",
                [
                    (
                        "sum by (strategy, tier, reason_class) (rate(tiergate_route_decisions_total[5m]))",
                        "{{strategy}} {{tier}} {{reason_class}}",
                    )
                ],
            ),
            (
                "Predictor error (MAPE, share within 15%)",
                "percentunit",
                [
                    (
                        f"sum by (tier, target) (rate({APE}_sum[15m])) / "
                        f"sum by (tier, target) (rate({APE}_count[15m]))",
                        "MAPE {{tier}} {{target}}",
                    ),
                    (
                        f'sum by (tier, target) (rate({APE}_bucket{{le="0.15"}}[15m])) / '
                        f"sum by (tier, target) (rate({APE}_count[15m]))",
                        "within 15% {{tier}} {{target}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Breakers and degradation",
        [
            (
                "Breaker state (0 closed, 1 half-open, 2 open)",
                "short",
                [("tiergate_breaker_state", "{{tier}} {{modality}}")],
            ),
            (
                "Breaker transitions",
                "short",
                [
                    (
                        "sum by (tier, modality, state) (increase(tiergate_breaker_transitions_total[5m]))",
                        "{{tier}} {{modality}} -> {{state}}",
                    )
                ],
            ),
            (
                "Degraded requests by modality",
                "reqps",
                [("sum by (modality) (rate(tiergate_degraded_requests_total[5m]))", "{{modality}}")],
            ),
            (
                "Residency rule matches",
                "reqps",
                [
                    (
                        "sum by (rule, action) (rate(tiergate_residency_matches_total[5m]))",
                        "{{rule}} {{action}}",
                    )
                ],
            ),
        ],
    ),
    (
        "Embeddings",
        [
            (
                "Embedding inputs by source",
                "reqps",
                [("sum by (result) (rate(tiergate_embedding_inputs_total[5m]))", "{{result}}")],
            ),
            (
                "Embedding batch rows p50 / p99",
                "short",
                [
                    (q(0.5, "tiergate_embedding_batch_rows"), "p50"),
                    (q(0.99, "tiergate_embedding_batch_rows"), "p99"),
                ],
            ),
        ],
    ),
    (
        "Ledger",
        [
            (
                "Ledger write p50 / p99",
                "s",
                [
                    (q(0.5, "tiergate_ledger_write_seconds"), "p50"),
                    (q(0.99, "tiergate_ledger_write_seconds"), "p99"),
                ],
            ),
            (
                "Ledger backlog (rows not yet in the database)",
                "short",
                [("tiergate_ledger_backlog_rows", "rows")],
            ),
            (
                "Ledger rows refused by the database (set aside in quarantine.jsonl)",
                "short",
                [("increase(tiergate_ledger_quarantined_rows_total[5m])", "rows / 5 min")],
            ),
        ],
    ),
    (
        "Batches",
        [
            (
                "Batch lines by outcome",
                "reqps",
                [("sum by (outcome) (rate(tiergate_batch_lines_total[5m]))", "{{outcome}}")],
            ),
            (
                "Batch lines running (per gateway)",
                "short",
                [("tiergate_batch_lines_running", "{{instance}}")],
            ),
            (
                "Active batches and lines left",
                "short",
                [
                    ("max(tiergate_batches_active)", "batches"),
                    ("max(tiergate_batch_lines_left)", "lines left"),
                ],
            ),
        ],
    ),
    (
        "Scaling signal",
        [
            (
                "Cloud replicas: desired vs healthy",
                "short",
                [
                    ("max(tiergate_cloud_desired_replicas)", "desired"),
                    ('sum(tiergate_replica{signal="healthy"})', "healthy"),
                ],
            ),
            (
                "Cloud arrivals/s: observed and forecast",
                "reqps",
                [("tiergate_cloud_arrivals_per_second", "{{kind}}")],
            ),
        ],
    ),
]


def panel(
    panel_id: int, title: str, unit: str, targets: list[tuple[str, str]], x: int, y: int
) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": expr,
                "legendFormat": legend,
                "refId": chr(ord("A") + i),
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y, next_id = 0, 1
    for row_title, row_panels in ROWS:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        for i, (title, unit, targets) in enumerate(row_panels):
            panels.append(panel(next_id, title, unit, targets, 8 * (i % 3), y + 8 * (i // 3)))
            next_id += 1
        y += 8 * ((len(row_panels) + 2) // 3)
    return {
        "title": "tiergate",
        "uid": "tiergate",
        "description": "tiergate gateway: requests, admission, tiers and replicas, preprocessing, caches, "
        "routing, breakers, ledger, batches and the cloud scaling signal "
        "(built by deploy/grafana/build_dashboard.py)",
        "tags": ["tiergate"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
