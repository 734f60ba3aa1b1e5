"""The cloud pool over two real vLLM replicas: load balancing, affinity, a replica killed and brought back."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.conftest import Gateway, VLLMServer, start_gateway

pytestmark = pytest.mark.cloud

HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def pool(
    cloud_gateway: Gateway, second_vllm: VLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    first = next(t for t in cloud_gateway.readyz()["tiers"] if t["name"] == "cloud")["instances"][0]["url"]
    second_vllm.wait_healthy()
    config = (
        f'[edge]\nenabled = false\n[cloud]\nurls = ["{first}", "{second_vllm.url}"]\n'
        "health_interval_s = 0.5\nscrape_interval_s = 0.25\nslow_start_s = 0\neject_s = 1\n"
    )
    gw = start_gateway(tmp_path_factory.mktemp("pool"), config, edge=False)
    gw.wait(lambda: "2/2" in _cloud(gw)["detail"], 60, "both replicas")
    yield gw
    gw.stop()


def _cloud(gw: Gateway) -> dict[str, object]:
    return next(t for t in gw.readyz()["tiers"] if t["name"] == "cloud")


def _ask(gw: Gateway, session: str, max_tokens: int = 8) -> str:
    raw = gw.client().chat.completions.with_raw_response.create(
        model="cloud", messages=HELLO, max_tokens=max_tokens, extra_headers={"X-Session-ID": session}
    )
    assert raw.parse().choices[0].message.content is not None
    return str(raw.headers["x-tiergate-instance"])


def test_a_conversation_stays_on_its_replica(pool: Gateway) -> None:
    homes = {session: {_ask(pool, session) for _ in range(3)} for session in (f"s{i}" for i in range(8))}
    assert all(len(served_by) == 1 for served_by in homes.values()), homes
    assert {next(iter(s)) for s in homes.values()} == {"cloud-0", "cloud-1"}  # sessions spread


def test_concurrent_load_spreads_over_both_replicas(pool: Gateway) -> None:
    served: list[str] = []

    def one(i: int) -> None:
        served.append(_ask(pool, "one-busy-conversation", max_tokens=48))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    counts = Counter(served)
    assert len(served) == 6
    # one session, but bounded load moves the overflow to the other replica
    assert set(counts) == {"cloud-0", "cloud-1"}, counts


def test_a_killed_replica_is_ejected_and_a_restarted_one_rejoins(
    pool: Gateway, second_vllm: VLLMServer
) -> None:
    second_vllm.kill()
    answers = [_ask(pool, f"after-kill-{i}") for i in range(6)]  # all succeed, retried before the first byte
    assert set(answers) == {"cloud-0"}
    pool.wait(lambda: "1/2" in _cloud(pool)["detail"], 20, "the dead replica to be marked down")
    second_vllm.start()
    second_vllm.wait_healthy()
    pool.wait(lambda: "2/2" in _cloud(pool)["detail"], 30, "the replica to rejoin")
    assert "cloud-1" in {_ask(pool, f"after-return-{i}") for i in range(8)}
