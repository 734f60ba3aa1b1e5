"""OpenAI's Files and Batch APIs end to end, with the official client, on one real gateway (the
embedded defaults' edge tier: real llama.cpp; the embedding model; no cloud):
- files.create → batches.create → batches.retrieve (polled) → files.content of the output and error
  files, for chat lines (with tools, with structured output), Responses lines and embeddings lines;
- bad lines (not JSON, another URL, no custom_id, a custom_id used twice, a body the endpoint refuses)
  are lines of the error file, each with its line number, and the good lines still run;
- each line's ledger row is tagged with the batch, priced at batch.price_factor × the live price;
- another tenant's file or batch is a 404; a cancelled batch takes no new line and bills only what ran;
- the answers' shapes are checked against OpenAI's OpenAPI description (FileObject, Batch).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Gateway, start_gateway
from tests.integration.test_tenants_api import admin
from tests.openai_schema import validate

CONFIG = (
    "[cloud]\nenabled = false\n[ledger]\nflush_interval_s = 0.1\n"
    "[batch]\npoll_s = 0.1\nconcurrency = 2\nprice_factor = 0.5\nmax_file_bytes = 1048576\nmax_lines = 1000\n"
)
EMBEDDING_MODEL = "all-MiniLM-L6-v2"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
PERSON = {
    "type": "json_schema",
    "json_schema": {
        "name": "person",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path_factory.mktemp("batches"), CONFIG)
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def client(gw: Gateway) -> openai.OpenAI:
    return gw.client(timeout=60)


def jsonl(lines: list[Any]) -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()


def line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def finished(client: openai.OpenAI, batch_id: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "cancelled", "expired"):
            return batch
        time.sleep(0.2)
    raise AssertionError(f"batch {batch_id} still {batch.status} after {timeout}s")


def contents(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines()]


def metric(gw: Gateway, series: str) -> float:
    """One series' value on /metrics (0 when it is not there yet)."""
    for text in httpx.get(f"{gw.url}/metrics", timeout=10).text.splitlines():
        if text.startswith(series + " "):
            return float(text.split()[-1])
    return 0.0


SLOW_LANE = 'tiergate_queue_wait_seconds_count{lane="slow",tier="edge"}'


def get(gw: Gateway, path: str) -> Any:
    """A GET's JSON as sent (the schema checks read what went on the wire, not the client's model)."""
    answer = httpx.get(f"{gw.url}{path}", headers=gw.auth, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def ledger_of(gw: Gateway, batch_id: str, want: int) -> list[tuple[Any, ...]]:
    """The batch's ledger rows (tagged batch=<id>), once ``want`` have reached the database."""
    deadline = time.monotonic() + 10
    while True:
        with sqlite3.connect(gw.data_dir / "tiergate.db") as db:
            rows = db.execute(
                "SELECT l.request_id, l.status, l.cost_nusd, l.tier, l.prompt_tokens, l.completion_tokens "
                "FROM ledger l JOIN ledger_tags t ON t.entry_id = l.entry_id "
                "WHERE t.key = 'batch' AND t.value = ?",
                (batch_id,),
            ).fetchall()
        if len(rows) >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_chat_batch_with_tools_structured_output_and_bad_lines(gw: Gateway, client: openai.OpenAI) -> None:
    url = "/v1/chat/completions"
    ask = {"model": "edge", "max_tokens": 8, "temperature": 0}
    lines = [
        line("plain", url, {**ask, "messages": [{"role": "user", "content": "Say hi."}]}),
        line(
            "tools",
            url,
            {
                **ask,
                "max_tokens": 40,
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": [WEATHER],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            },
        ),
        line(
            "structured",
            url,
            {
                **ask,
                "max_tokens": 40,
                "messages": [{"role": "user", "content": "Ada is 36. Give her as JSON."}],
                "response_format": PERSON,
            },
        ),
        "{not json",  # line 4
        line("elsewhere", "/v1/embeddings", {"model": EMBEDDING_MODEL, "input": "x"}),  # line 5
        {"method": "POST", "url": url, "body": ask},  # line 6: no custom_id
        line("plain", url, {**ask, "messages": [{"role": "user", "content": "Again."}]}),  # line 7
        line("refused", url, {**ask, "messages": "not a list"}),  # line 8: the endpoint refuses it
    ]
    slow_before = metric(gw, SLOW_LANE)
    uploaded = client.files.create(file=("lines.jsonl", jsonl(lines)), purpose="batch")
    validate("OpenAIFile", get(gw, f"/v1/files/{uploaded.id}"))
    assert uploaded.purpose == "batch" and uploaded.bytes == len(jsonl(lines))
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint=url, completion_window="24h", metadata={"job": "tickets"}
    )
    assert batch.status == "in_progress" and batch.metadata == {"job": "tickets"}
    batch = finished(client, batch.id)
    assert batch.status == "completed", batch
    validate("Batch", get(gw, f"/v1/batches/{batch.id}"))
    validate("ListBatchesResponse", get(gw, "/v1/batches"))
    assert metric(gw, SLOW_LANE) == slow_before + 3  # each line that ran took the slow lane, small as it is
    assert metric(gw, 'tiergate_batch_lines_total{outcome="ok"}') >= 3
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (
        8,
        3,
        5,
    )

    output = {x["custom_id"]: x for x in contents(client, batch.output_file_id)}
    assert set(output) == {"plain", "tools", "structured"}
    for x in output.values():
        assert x["error"] is None and x["response"]["status_code"] == 200
        assert x["response"]["body"]["object"] == "chat.completion"
        assert x["id"].startswith("batch_req_")
    call = output["tools"]["response"]["body"]["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    person = json.loads(output["structured"]["response"]["body"]["choices"][0]["message"]["content"])
    assert set(person) == {"name", "age"}

    errors = {x["error"]["line"]: x for x in contents(client, batch.error_file_id)}
    assert set(errors) == {4, 5, 6, 7, 8}
    assert errors[4]["error"]["code"] == "invalid_json_line" and errors[4]["response"] is None
    assert errors[5]["error"]["code"] == "invalid_url" and errors[5]["custom_id"] == "elsewhere"
    assert errors[6]["custom_id"] is None and "custom_id" in errors[6]["error"]["message"]
    assert errors[7]["error"]["code"] == "duplicate_custom_id"
    refused = errors[8]
    assert refused["custom_id"] == "refused" and refused["response"]["status_code"] == 400
    assert refused["response"]["body"]["error"]["param"] == "messages"

    # One ledger row per line answered, tagged with the batch, at half price (a body refused by its
    # endpoint's parse leaves none, as a live request's does not).
    rows = ledger_of(gw, batch.id, 3)
    assert sorted(r[0] for r in rows) == sorted(f"{batch.id}-{n}" for n in (1, 2, 3))
    live = client.chat.completions.with_raw_response.create(
        model="edge",
        max_tokens=8,
        temperature=0,
        messages=[{"role": "user", "content": "Say hi."}],
        extra_headers={"Cache-Control": "no-cache"},
    )
    rid = live.headers["x-request-id"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with sqlite3.connect(gw.data_dir / "tiergate.db") as db:
            found = db.execute(
                "SELECT cost_nusd, prompt_tokens, completion_tokens FROM ledger WHERE request_id = ?", (rid,)
            ).fetchone()
        if found:
            break
        time.sleep(0.1)
    plain = next(r for r in rows if r[0] == f"{batch.id}-1")
    assert found is not None and (plain[4], plain[5]) == (found[1], found[2])  # the same tokens
    assert plain[2] == round(found[0] * 0.5) and found[0] > 0


def test_responses_and_embeddings_batches(client: openai.OpenAI) -> None:
    responses = jsonl(
        [
            line(
                f"r{i}", "/v1/responses", {"model": "edge", "input": f"Count to {i}.", "max_output_tokens": 8}
            )
            for i in range(2)
        ]
    )
    embeds = jsonl(
        [line(f"e{i}", "/v1/embeddings", {"model": EMBEDDING_MODEL, "input": f"text {i}"}) for i in range(3)]
    )
    made = []
    for data, url in ((responses, "/v1/responses"), (embeds, "/v1/embeddings")):
        f = client.files.create(file=("in.jsonl", data), purpose="batch")
        made.append(client.batches.create(input_file_id=f.id, endpoint=url, completion_window="24h"))  # type: ignore[arg-type]
    r_batch, e_batch = (finished(client, b.id) for b in made)
    assert r_batch.status == e_batch.status == "completed"
    assert r_batch.error_file_id is None and e_batch.error_file_id is None
    r_out = contents(client, r_batch.output_file_id)
    assert sorted(x["custom_id"] for x in r_out) == ["r0", "r1"]
    assert all(x["response"]["body"]["object"] == "response" for x in r_out)
    assert all(x["response"]["body"]["status"] in ("completed", "incomplete") for x in r_out)
    e_out = contents(client, e_batch.output_file_id)
    assert sorted(x["custom_id"] for x in e_out) == ["e0", "e1", "e2"]
    assert all(len(x["response"]["body"]["data"][0]["embedding"]) == 384 for x in e_out)


def test_files_api_and_tenant_isolation(gw: Gateway, client: openai.OpenAI) -> None:
    data = jsonl([line("a", "/v1/embeddings", {"model": EMBEDDING_MODEL, "input": "a"})])
    older = client.files.create(file=("older.jsonl", data), purpose="batch")
    mine = client.files.create(file=("mine.jsonl", data), purpose="batch")
    assert client.files.retrieve(mine.id).filename == "mine.jsonl"
    assert client.files.content(mine.id).content == data
    listed = client.files.list(purpose="batch")
    assert mine.id in [f.id for f in listed.data]
    validate("ListFilesResponse", get(gw, "/v1/files?purpose=batch"))
    first = client.files.list(limit=1)
    assert len(first.data) == 1 and first.has_more
    following = client.files.list(limit=1, after=first.data[0].id)
    assert following.data[0].id != first.data[0].id
    assert {older.id, mine.id} <= {f.id for f in client.files.list().data}
    with pytest.raises(openai.BadRequestError) as refused:
        client.files.create(file=("x.jsonl", data), purpose="assistants")
    assert refused.value.body["param"] == "purpose"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("x.jsonl", data), purpose="nonsense")  # type: ignore[arg-type]
    batch = client.batches.create(input_file_id=mine.id, endpoint="/v1/embeddings", completion_window="24h")

    tenant = f"t-{uuid.uuid4().hex[:8]}"
    assert admin(gw, "POST", "/tenants", json={"name": tenant}).status_code == 201
    made = admin(gw, "POST", "/keys", json={"tenant": tenant})
    assert made.status_code == 201, made.text
    other = gw.client(api_key=made.json()["key"])
    for call in (
        lambda: other.files.retrieve(mine.id),
        lambda: other.files.content(mine.id),
        lambda: other.files.delete(mine.id),
        lambda: other.batches.retrieve(batch.id),
        lambda: other.batches.cancel(batch.id),
        lambda: other.batches.create(
            input_file_id=mine.id, endpoint="/v1/embeddings", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert mine.id not in [f.id for f in other.files.list().data]
    assert batch.id not in [b.id for b in other.batches.list().data]
    assert batch.id in [b.id for b in client.batches.list().data]

    assert client.files.delete(mine.id).deleted
    before = len(client.files.list(purpose="batch").data)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(mine.id)
    empty = client.files.create(file=("empty.jsonl", b"\n"), purpose="batch")
    failed = client.batches.create(input_file_id=empty.id, endpoint="/v1/embeddings", completion_window="24h")
    assert failed.status == "failed" and failed.errors is not None
    assert failed.errors.data[0].code == "empty_file"
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=empty.id, endpoint="/v1/moderations", completion_window="24h")  # type: ignore[arg-type]
    unknown_field = httpx.post(
        f"{gw.url}/v1/files",
        headers=gw.auth,
        files={"file": ("x.jsonl", b"{}\n" * 10)},
        data={"purpose": "batch", "expires_after[anchor]": "created_at"},
    )
    assert (
        unknown_field.status_code == 400 and unknown_field.json()["error"]["param"] == "expires_after[anchor]"
    )
    with pytest.raises(openai.BadRequestError) as many:  # batch.max_lines = 1000
        client.files.create(file=("many.jsonl", b"{}\n" * 1001), purpose="batch")
    assert "max_lines" in many.value.message
    with pytest.raises(openai.APIStatusError) as large:  # batch.max_file_bytes = 1 MiB
        client.files.create(file=("large.jsonl", b"x" * (1 << 20) + b"\n"), purpose="batch")
    assert large.value.status_code == 413
    assert (
        len(client.files.list(purpose="batch").data) == before + 1
    )  # none of the refused was kept (only the empty one)


def test_lines_yield_to_an_interactive_request_and_a_cancelled_batch_bills_what_ran(
    gw: Gateway, client: openai.OpenAI
) -> None:
    url = "/v1/chat/completions"
    body = {"model": "edge", "max_tokens": 24, "temperature": 0}
    lines = [
        line(f"c{i}", url, {**body, "messages": [{"role": "user", "content": f"Story {i}."}]})
        for i in range(40)
    ]
    f = client.files.create(file=("many.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=f.id, endpoint=url, completion_window="24h")
    deadline = time.monotonic() + 60
    while client.batches.retrieve(batch.id).request_counts.completed < 1:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # An interactive request stops the lines being answered (they go back, unbilled, and run later).
    yielded = metric(gw, 'tiergate_batch_lines_total{outcome="yielded"}')
    live = client.chat.completions.create(
        model="edge",
        max_tokens=4,
        messages=[{"role": "user", "content": "Hi."}],
        extra_headers={"Cache-Control": "no-cache"},
    )
    assert live.choices[0].message.content is not None
    assert metric(gw, 'tiergate_batch_lines_total{outcome="yielded"}') > yielded
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = finished(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    counts = done.request_counts
    assert counts is not None and 1 <= counts.completed < 40 and counts.failed == 0
    ran = contents(client, done.output_file_id)
    assert len(ran) == counts.completed
    time.sleep(1.0)  # nothing more runs
    assert client.batches.retrieve(batch.id).request_counts.completed == counts.completed  # type: ignore[union-attr]
    rows = ledger_of(gw, batch.id, counts.completed)
    assert sorted(r[0] for r in rows) == sorted(f"{batch.id}-{int(x['custom_id'][1:]) + 1}" for x in ran)
