"""One tenant's labels move only its own traffic (issue 43): through a real ``tiergate serve`` with the
real edge (llama.cpp) and a stand-in cloud, with the quality model's default settings.

Tenant A asks short facts (bench/quality_isolation.py's templates) of the edge and labels 100, then
300, of the answers bad through ``POST /v1/feedback``.  A's facts must move to the cloud, and nothing
else: tenant B, who asks the same kinds of questions and gave no labels, keeps >= 95 % of its requests
where they went before; A's word games, never labelled, keep >= 80 %.  Then B's own 40 good labels
keep B where it was, and the reasons say what learning did: the tier it left out, its figure, the
labels behind it (own and shared), and never a learned figure on a tenant's 0 labels.

Exploration is off (``[router] exploration = 0``): it sends a share of requests to a tier not measured
lately whatever the labels say, which is not what this measures; the result cache is off so that each
request is routed again.  660 requests with ``max_tokens = 1``, four at a time: ~3 minutes on two
shared cores.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from bench.quality_isolation import FACTS, WORDS, prompts
from tests.conftest import Gateway, start_gateway
from tests.fakes import FakeVLLM
from tests.integration.test_tenants_api import admin

PROBES = 20  # requests of each (tenant, kind) routed before and after each round of labels


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with FakeVLLM(mode="ok", delay_s=0.01) as cloud:
        config = (
            f'[cloud]\nurls = ["{cloud.url}"]\nhealth_interval_s = 0.2\n'
            "[auth]\nkey_cache_s = 0.2\n[cache]\nenabled = false\n[router]\nexploration = 0.0\n"
        )
        gw = start_gateway(tmp_path_factory.mktemp("isolation"), config)
        gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the stand-in cloud")
        yield gw
        gw.stop()


def tenant(gw: Gateway) -> tuple[str, str]:
    name = f"iso{uuid.uuid4().hex[:8]}"
    assert admin(gw, "POST", "/tenants", json={"name": name}).status_code in (200, 201)
    return str(admin(gw, "POST", f"/tenants/{name}/keys").json()["key"]), name


def ask(gw: Gateway, key: str, text: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 1}
    resp = httpx.post(
        f"{gw.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120
    )
    assert resp.status_code == 200, resp.text
    return resp


def routed(gw: Gateway, key: str, texts: list[str]) -> list[tuple[str, str]]:
    """Where the router sends each text now, and why (four at a time: the labels are all learned)."""

    def one(text: str) -> tuple[str, str]:
        resp = ask(gw, key, text, "tiergate-auto")
        return resp.headers["x-tiergate-tier"], resp.headers["x-tiergate-route-reason"]

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, texts))


def label(gw: Gateway, key: str, name: str, texts: list[str], verdict: str) -> None:
    """Ask each text of the edge and label its answer ``verdict``; return once the model learned them."""
    before = labels_of(gw, name)

    def one(text: str) -> None:
        answer = ask(gw, key, text, "edge").json()["id"]
        resp = httpx.post(
            f"{gw.url}/v1/feedback",
            json={"id": answer, "label": verdict},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, texts))
    deadline = time.monotonic() + 20
    while labels_of(gw, name) < before + len(texts):  # labels fold beside the request path
        assert time.monotonic() < deadline, labels_of(gw, name)
        time.sleep(0.1)


def labels_of(gw: Gateway, name: str) -> int:
    tiers = admin(gw, "GET", f"/quality?tenant={name}").json()["tiers"]
    return sum(int(t["labels"]) for t in tiers if t["tenant"] == name)


def kept(before: list[tuple[str, str]], after: list[tuple[str, str]]) -> float:
    return sum(b[0] == a[0] for b, a in zip(before, after, strict=True)) / len(before)


def test_one_tenants_bad_labels_move_its_own_labelled_kind_only(gw: Gateway) -> None:
    key_a, name_a = tenant(gw)
    key_b, name_b = tenant(gw)
    probes = {
        ("a", "facts"): prompts(FACTS, PROBES, 1),
        ("a", "words"): prompts(WORDS, PROBES, 2),
        ("b", "facts"): prompts(FACTS, PROBES, 3),
        ("b", "words"): prompts(WORDS, PROBES, 4),
    }
    keys = {"a": key_a, "b": key_b}

    def route_all() -> dict[tuple[str, str], list[tuple[str, str]]]:
        return {p: routed(gw, keys[p[0]], texts) for p, texts in probes.items()}

    before = route_all()
    assert all(tier == "edge" for tier, _ in before[("a", "facts")]), before[("a", "facts")]
    assert all("acceptable" not in reason for rows in before.values() for _, reason in rows)

    bad = prompts(FACTS, 300, 10)
    for given, batch in ((100, bad[:100]), (300, bad[100:])):
        label(gw, key_a, name_a, batch, "bad")
        after = route_all()
        moved = after[("a", "facts")]
        assert sum(tier == "cloud" for tier, _ in moved) >= 0.9 * PROBES, (given, moved)
        for tier, reason in moved:
            if tier == "cloud":  # it says which tier the learned figure left out, and on what labels
                assert reason.startswith("cloud: edge not taken: acceptable 0."), reason
                assert f"< floor 0.7 ({given} own labels, 0 shared)" in reason, reason
        for who in (("b", "facts"), ("b", "words")):
            assert kept(before[who], after[who]) >= 0.95, (given, who, after[who])
            # No learned figure on B's 0 labels: its reasons are the declared check's, as before.
            assert all("acceptable" not in reason for _, reason in after[who]), after[who]
        assert kept(before[("a", "words")], after[("a", "words")]) >= 0.8, (given, after[("a", "words")])
        print(given, {f"{t}.{k}": kept(before[(t, k)], rows) for (t, k), rows in after.items()})

    # B's own good labels keep it where it was, and its reasons now give its own figure.
    label(gw, key_b, name_b, prompts(FACTS, 20, 20) + prompts(WORDS, 20, 21), "good")
    after = route_all()
    for who in (("b", "facts"), ("b", "words")):
        assert kept(before[who], after[who]) >= 0.95, (who, after[who])
    learned = [reason for _, reason in after[("b", "facts")] if "acceptable" in reason]
    assert learned, after[("b", "facts")]
    assert all(r.startswith("edge: acceptable 0.") and "(40 own labels, 20 shared)" in r for r in learned)
    print("b40", {f"{t}.{k}": kept(before[(t, k)], rows) for (t, k), rows in after.items()}, learned[:1])
