from __future__ import annotations

from collections import Counter

from tiers.cloud._balance import Balancer
from tiers.cloud._replica import EngineLoad, Replica, parse_engine_load

NOW = 1000.0


def replicas(n: int = 3) -> list[Replica]:
    return [Replica(f"http://r{i}", f"r{i}", healthy=True, healthy_since=0.0) for i in range(n)]


def test_least_load_counts_cost_not_requests() -> None:
    pool = replicas(2)
    pool[0].in_flight, pool[0].outstanding_cost = 1, 500.0  # one long generation
    pool[1].in_flight, pool[1].outstanding_cost = 3, 60.0  # three short chats
    chosen, how = Balancer().pick(pool, cost=20, mean_cost=50, now=NOW)  # type: ignore[misc]
    assert (chosen.name, how) == ("r1", "least-load")


def test_vllm_reported_queue_counts_as_load() -> None:
    pool = replicas(2)
    pool[0].engine = EngineLoad(waiting=8, running=4, kv_cache_usage=0.9)  # busy with other clients
    chosen, _ = Balancer().pick(pool, cost=20, mean_cost=50, now=NOW)  # type: ignore[misc]
    assert chosen.name == "r1"


def test_affinity_is_stable_and_spreads_keys() -> None:
    pool = replicas(3)
    balancer = Balancer()
    balancer.set_members([r.name for r in pool])
    homes = {}
    for key in (f"session-{i}" for i in range(60)):
        first = balancer.pick(pool, cost=10, mean_cost=10, now=NOW, affinity=key)
        again = balancer.pick(pool, cost=10, mean_cost=10, now=NOW, affinity=key)
        assert first is not None and again is not None
        assert first[0] is again[0] and first[1] == "affinity"
        homes[key] = first[0].name
    assert set(Counter(homes.values())) == {"r0", "r1", "r2"}


def test_affinity_yields_to_bounded_load() -> None:
    pool = replicas(2)
    balancer = Balancer(bound=1.25)
    balancer.set_members([r.name for r in pool])
    home, _ = balancer.pick(pool, cost=10, mean_cost=10, now=NOW, affinity="chat-1")  # type: ignore[misc]
    home.outstanding_cost = 1000.0  # overloaded
    moved, how = balancer.pick(pool, cost=10, mean_cost=10, now=NOW, affinity="chat-1")  # type: ignore[misc]
    assert moved is not home and how == "affinity"  # the next replica on the ring


def test_unavailable_replicas_are_skipped() -> None:
    pool = replicas(3)
    pool[0].healthy = False
    pool[1].draining = True
    pool[2].ejected_until = NOW + 5
    assert Balancer().pick(pool, cost=1, mean_cost=1, now=NOW) is None
    assert Balancer().pick(pool, cost=1, mean_cost=1, now=NOW + 6)[0].name == "r2"  # type: ignore[index]
    assert Balancer().pick(replicas(2), cost=1, mean_cost=1, now=NOW, exclude={"r0"})[0].name == "r1"  # type: ignore[index]


def test_a_returning_replica_starts_slow() -> None:
    pool = replicas(2)
    pool[1].healthy_since = NOW - 1  # back one second ago, slow start 10 s
    pool[0].outstanding_cost = 30.0
    chosen, _ = Balancer(slow_start_s=10).pick(pool, cost=10, mean_cost=10, now=NOW)  # type: ignore[misc]
    assert chosen.name == "r0"  # (30 + 10) / 1.0 beats (0 + 10) / 0.19
    chosen, _ = Balancer(slow_start_s=10).pick(pool, cost=10, mean_cost=10, now=NOW + 9)  # type: ignore[misc]
    assert chosen.name == "r1"  # (0 + 10) / 0.91 once it has warmed up


def test_passive_ejection_doubles() -> None:
    r = replicas(1)[0]
    for _ in range(3):
        r.failed("boom", eject_after=3, base_ejection_s=2)
    assert r.ejections == 1 and r.ejected_until > 0
    first = r.ejected_until
    for _ in range(3):
        r.failed("boom", eject_after=3, base_ejection_s=2)
    assert r.ejected_until - first > 1.5  # 4 s the second time


def test_parse_vllm_metrics() -> None:
    text = """# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
"""
    assert parse_engine_load(text) == EngineLoad(waiting=3.0, running=2.0, kv_cache_usage=0.25)


def test_round_robin_baseline_ignores_load_and_affinity() -> None:
    pool = replicas(2)
    pool[0].outstanding_cost = 1000.0
    balancer = Balancer(strategy="round-robin")
    balancer.set_members([r.name for r in pool])
    names = [balancer.pick(pool, cost=1, mean_cost=1, now=NOW, affinity="x")[0].name for _ in range(4)]  # type: ignore[index]
    assert names == ["r1", "r0", "r1", "r0"]
