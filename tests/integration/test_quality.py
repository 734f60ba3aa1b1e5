"""Quality learned from outcomes, through a real ``tiergate serve`` (the real edge, llama.cpp, and a fake
cloud): feedback names a tenant's own answers only; a re-ask and an abandoned stream are labels the
admin API shows; once a tier has enough labels the route reason gives the learned acceptability.

The quality model's gate is lowered by settings (3 labels of the tenant's own, each word in one of them,
any uncertainty) so a few requests do.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Gateway, start_gateway
from tests.fakes import FakeVLLM
from tests.integration.test_tenants_api import admin

SHORT = {"max_tokens": 4, "temperature": 0}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM(mode="ok", delay_s=0.05, stream_chunks=100) as cloud:
        yield cloud


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, fake: FakeVLLM) -> Iterator[Gateway]:
    config = (
        f'[cloud]\nurls = ["{fake.url}"]\nhealth_interval_s = 0.2\n'
        "[auth]\nkey_cache_s = 0.2\n[cache]\nenabled = false\n"
        "[router.quality]\nmin_labels = 3\nseen_labels = 1\nmax_sd = 100.0\n"
    )
    gw = start_gateway(tmp_path_factory.mktemp("quality"), config)
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    yield gw
    gw.stop()


def tenant(gw: Gateway) -> tuple[str, str]:
    name = f"q{uuid.uuid4().hex[:8]}"
    assert admin(gw, "POST", "/tenants", json={"name": name}).status_code in (200, 201)
    return str(admin(gw, "POST", f"/tenants/{name}/keys").json()["key"]), name


def chat(
    gw: Gateway, key: str, text: str, model: str = "edge", extra: dict[str, Any] | None = None, **headers: str
) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": text}], **SHORT, **(extra or {})}
    resp = httpx.post(
        f"{gw.url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}", **headers},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    return resp


def feedback(gw: Gateway, key: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/feedback", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def sources(gw: Gateway, name: str, want: str) -> list[dict[str, Any]]:
    """The tenant's labels by source, once one from ``want`` is there (labels fold in the background)."""
    deadline = time.monotonic() + 10
    while True:
        body = admin(gw, "GET", f"/quality?tenant={name}").json()
        if any(s["source"] == want for s in body["sources"]) or time.monotonic() > deadline:
            return list(body["sources"])
        time.sleep(0.1)


def test_feedback_names_the_tenants_own_answers_only(gw: Gateway) -> None:
    mine, _ = tenant(gw)
    theirs, _ = tenant(gw)
    answer_id = chat(gw, mine, "What is the capital of Peru?").json()["id"]
    refused = feedback(gw, theirs, id=answer_id, label="good")
    assert refused.status_code == 404, refused.text
    assert feedback(gw, mine, id="chatcmpl-nothing-like-it", score=1).status_code == 404
    assert feedback(gw, mine, id=answer_id, score=0.5, label="good").status_code == 400
    assert feedback(gw, mine, id=answer_id, score=1.5).status_code == 400
    assert feedback(gw, mine, id=answer_id, label="good", note="x" * 1001).status_code == 400
    given = feedback(gw, mine, id=answer_id, score=0.9, note="right")
    assert given.status_code == 200, given.text
    assert given.json() == {"object": "feedback", "id": answer_id, "label": "good", "tier": "edge"}
    assert feedback(gw, mine, id=answer_id, label="good").status_code == 200  # the same again: as before
    assert feedback(gw, mine, id=answer_id, label="bad").status_code == 409  # the first label counts
    # Recorded beside the answer's ledger row, by its request id.
    rid = answer_id.removeprefix("chatcmpl-")
    query = (
        "SELECT l.tier, l.good, l.source, l.note, ledger.status FROM answer_labels l "
        "JOIN ledger ON ledger.request_id = l.request_id WHERE l.request_id = ?"
    )
    deadline = time.monotonic() + 10
    while True:
        with sqlite3.connect(gw.data_dir / "tiergate.db") as db:
            rows = db.execute(query, (rid,)).fetchall()
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rows == [("edge", 1, "feedback", "right", 200)]


@pytest.mark.parametrize("said_by", ["X-Session-ID", "safety_identifier", "user"])
def test_a_reask_labels_the_earlier_answer_bad(gw: Gateway, said_by: str) -> None:
    """The session is the header's, else the end user's (``safety_identifier``, else ``user``)."""
    key, name = tenant(gw)
    who = f"s-{uuid.uuid4().hex[:6]}"
    session = {said_by: who} if said_by == "X-Session-ID" else {}
    extra = {} if session else {said_by: who}
    first = chat(gw, key, "How many legs does a spider have?", extra=extra, **session).json()["id"]
    chat(gw, key, "How many legs does a spider have??", extra=extra, **session)
    labelled = [s for s in sources(gw, name, "re-ask") if s["source"] == "re-ask"]
    assert labelled == [{"tenant": name, "tier": "edge", "source": "re-ask", "good": False, "labels": 1}]
    assert feedback(gw, key, id=first, label="good").status_code == 409  # labelled by the re-ask
    tiers = admin(gw, "GET", f"/quality?tenant={name}").json()["tiers"]
    assert [(t["tier"], t["labels"], t["good"]) for t in tiers] == [("edge", 1, 0)]
    assert tiers[0]["hours"][-1]["labels"] == 1


def test_a_stream_its_client_leaves_is_a_bad_label(gw: Gateway) -> None:
    key, name = tenant(gw)
    body = {
        "model": "edge",
        "messages": [{"role": "user", "content": "Count from one to five hundred in words."}],
        "max_tokens": 300,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream(
        "POST",
        f"{gw.url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    ) as resp:
        assert resp.status_code == 200
        read = 0
        for line in resp.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                read += 1
            if read >= 5:
                break
    labelled = [s for s in sources(gw, name, "abandoned") if s["source"] == "abandoned"]
    assert labelled == [{"tenant": name, "tier": "edge", "source": "abandoned", "good": False, "labels": 1}]


def test_the_reason_gives_the_learned_acceptability_once_there_are_labels(gw: Gateway) -> None:
    key, _ = tenant(gw)
    reasons = []
    for i in range(8):
        resp = chat(gw, key, f"Name a colour of the rainbow, number {i}.", model="tiergate-auto")
        reasons.append(resp.headers["x-tiergate-route-reason"])
        if "acceptable" in reasons[-1]:
            break
        assert feedback(gw, key, id=resp.json()["id"], label="good").status_code == 200
        time.sleep(0.2)  # the label is folded beside the request path
    assert "acceptable" in reasons[-1], reasons
    # Its own 3 labels; other tests' tenants' labels (a few each) are in the shared prior.
    assert re.search(r"floor 0\.7 \(3 own labels, \d+ shared\)", reasons[-1]), reasons[-1]


@pytest.fixture(scope="module")
def shadow_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway whose cloud takes 2 s an answer: a shadow asked of it takes that long."""
    with FakeVLLM(mode="slow", delay_s=2.0) as slow:
        config = f'[cloud]\nurls = ["{slow.url}"]\nhealth_interval_s = 0.2\n[cache]\nenabled = false\n'
        gw = start_gateway(tmp_path_factory.mktemp("shadow"), config)
        gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
        yield gw
        gw.stop()


def test_shadows_stay_within_their_budget_and_never_delay_the_answer(shadow_gw: Gateway) -> None:
    gw = shadow_gw
    key, name = tenant(gw)
    budget = 3e-5  # a shadow costs ~4.5e-6 on the cloud's prices, at worst ~1.2e-5 (max_tokens 4)
    policy = {"shadow": {"enabled": True, "rate": 1.0, "budget_usd": budget, "reference": "cloud"}}
    assert admin(gw, "PUT", f"/tenants/{name}/policy", json=policy).status_code == 200
    took = []
    for i in range(8):
        started = time.monotonic()
        chat(gw, key, f"Name a month of the year, number {i}.")
        took.append(time.monotonic() - started)
        time.sleep(2.3)  # the shadow (2 s at the cloud) ends before the next answer
    assert max(took) < 1.5, took  # the client never waits for its shadow
    deadline = time.monotonic() + 10
    while True:
        with sqlite3.connect(gw.data_dir / "tiergate.db") as db:
            rows = db.execute(
                "SELECT ledger.request_id, cost_nusd, tier FROM ledger JOIN tenants ON tenants.id = ledger.tenant_id "
                "WHERE tenants.name = ? AND endpoint = 'shadow'",
                (name,),
            ).fetchall()
        if len(rows) >= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert 1 <= len(rows) < 8, rows  # the budget stopped them before every answer was shadowed
    assert sum(cost for _, cost, _ in rows) / 1e9 <= budget
    assert all(rid.startswith("shadow-") and tier == "cloud" for rid, _, tier in rows)
    labelled = [s for s in sources(gw, name, "shadow") if s["source"] == "shadow"]
    assert sum(s["labels"] for s in labelled) == len(rows)
    report = admin(gw, "GET", f"/reports/costs?tenant={name}&group_by=endpoint").json()
    assert "shadow" in json.dumps(report)
