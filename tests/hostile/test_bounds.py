"""Lists and free-form JSON are bounded while a body is read, not after it is built (issue 34, item 1):
each payload of that round, and the same shape on every endpoint that takes it, is a shaped 400
naming the field, with the serving process's memory grown by 64 MiB at most and ``/healthz``
answering within 100 ms throughout.

A gateway of its own with the default 16 MiB body limit (the package's target takes 1 MiB), in
front of a fake cloud; the payloads fill that limit as the reviewer's did.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import Gateway
from tests.fakes import FakeVLLM
from tests.faults._support import start_cloud_gateway
from tests.hostile.conftest import CLOUD_ABILITIES

BODY_LIMIT = 16 << 20  # server.max_body_bytes' default
MAX_RSS_GROWTH_KIB = 64 << 10
MAX_HEALTHZ_S = 0.100


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with FakeVLLM() as fake:
        gw = start_cloud_gateway(tmp_path_factory.mktemp("bounds"), fake.url, CLOUD_ABILITIES)
        yield gw
        gw.stop()


def fill(head: bytes, item: bytes, tail: bytes, most: int | None = None) -> bytes:
    """``head`` + as many ``item``s, comma-separated, as fit the body limit (or ``most``) + ``tail``."""
    room = (BODY_LIMIT - len(head) - len(tail) + 1) // (len(item) + 1)
    count = room if most is None else min(room, most)
    return head + b",".join([item] * count) + tail


def with_list(template: str, item: bytes, most: int | None = None) -> bytes:
    """``template`` with its ``@`` filled with ``item``s (comma-separated), as many as fit the body
    limit, or ``most``."""
    before, after = template.split("@")
    return fill(before.encode(), item, after.encode(), most)


HI = '"messages": [{"role": "user", "content": "hi"}]'
# (name, endpoint, body, the param named in the 400)
CASES: list[tuple[str, str, Callable[[], bytes], str]] = [
    (
        "chat: 645,274 empty text parts in one message",
        "/v1/chat/completions",
        lambda: with_list(
            '{"model": "cloud", "messages": [{"role": "user", "content": [@]}]}',
            b'{"type":"text","text":""}',
            most=645_274,
        ),
        "messages[0].content",
    ),
    (
        "responses: empty input_text parts in one message",
        "/v1/responses",
        lambda: with_list(
            '{"model": "cloud", "input": [{"role": "user", "content": [@]}]}',
            b'{"type":"input_text","text":""}',
        ),
        "input[0].content",
    ),
    (
        "chat: a message per empty text",
        "/v1/chat/completions",
        lambda: with_list('{"model": "cloud", "messages": [@]}', b'{"role":"user","content":""}'),
        "messages",
    ),
    (
        "responses: an input item per empty text",
        "/v1/responses",
        lambda: with_list('{"model": "cloud", "input": [@]}', b'{"role":"user","content":""}'),
        "input",
    ),
    (
        "chat: a tool call per empty call",
        "/v1/chat/completions",
        lambda: with_list(
            '{"model": "cloud", "messages": [{"role": "assistant", "tool_calls": [@]}]}',
            b'{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}',
        ),
        "messages[0].tool_calls",
    ),
    (
        "embeddings: 4,194,294 one-token inputs",
        "/v1/embeddings",
        lambda: with_list('{"model": "all-MiniLM-L6-v2", "input": [@]}', b'"a"', most=4_194_294),
        "input",
    ),
    (
        "embeddings: one row of token ids",
        "/v1/embeddings",
        lambda: with_list('{"model": "all-MiniLM-L6-v2", "input": [[@]]}', b"1"),
        "input[0]",
    ),
    (
        "completions: one-token prompts",
        "/v1/completions",
        lambda: with_list('{"model": "cloud", "prompt": [@]}', b'"a"'),
        "prompt",
    ),
    (
        "chat: one-token stop sequences",
        "/v1/chat/completions",
        lambda: with_list('{"model": "cloud", ' + HI + ', "stop": [@]}', b'"a"'),
        "stop",
    ),
    (
        "chat: 5.59 M empty lists in a tool's parameters",
        "/v1/chat/completions",
        lambda: with_list(
            '{"model": "cloud", ' + HI + ', "tools": [{"type": "function", "function": {"name": "f", '
            '"parameters": {"type": "object", "x": [@]}}}]}',
            b"[]",
        ),
        "tools[0].function.parameters",
    ),
    (
        "chat: empty lists in a json_schema response format",
        "/v1/chat/completions",
        lambda: with_list(
            '{"model": "cloud", ' + HI + ', "response_format": {"type": "json_schema", "json_schema": '
            '{"name": "n", "schema": {"type": "object", "x": [@]}}}}',
            b"[]",
        ),
        "response_format.json_schema.schema",
    ),
    (
        "responses: empty lists in a function tool's parameters",
        "/v1/responses",
        lambda: with_list(
            '{"model": "cloud", "input": "hi", "tools": [{"type": "function", "name": "f", '
            '"parameters": {"type": "object", "x": [@]}}]}',
            b"[]",
        ),
        "tools[0].parameters",
    ),
    (
        "responses: empty lists in a json_schema text format",
        "/v1/responses",
        lambda: with_list(
            '{"model": "cloud", "input": "hi", "text": {"format": {"type": "json_schema", "name": "n", '
            '"schema": {"type": "object", "x": [@]}}}}',
            b"[]",
        ),
        "text.format.schema",
    ),
    (
        "messages: empty text blocks in one message",
        "/v1/messages",
        lambda: with_list(
            '{"model": "cloud", "max_tokens": 8, "messages": [{"role": "user", "content": [@]}]}',
            b'{"type":"text","text":""}',
        ),
        "messages.0.content",  # as Anthropic writes a path
    ),
    (
        "messages: empty lists in a tool's input_schema",
        "/v1/messages",
        lambda: with_list(
            '{"model": "cloud", "max_tokens": 8, ' + HI + ', "tools": [{"name": "f", '
            '"input_schema": {"type": "object", "x": [@]}}]}',
            b"[]",
        ),
        "tools.0.input_schema",
    ),
    (
        "completions: empty lists in a prompt",
        "/v1/completions",
        lambda: with_list('{"model": "cloud", "prompt": [[@]]}', b"[]"),
        "prompt",
    ),
]


# A body of the limit's size refused at once (a model name over 256 characters): the first such body
# a process reads grows its heap, whatever the body says (measured: ~80 ms of a first /healthz here).
WARM = b'{"model": "' + b"m" * (BODY_LIMIT - 16) + b'"}'


@dataclass
class Measured:
    status: int
    error: dict[str, object]
    seconds: float
    rss_growth_kib: int
    healthz_max_s: float
    healthz_answers: int


# Asks /healthz over and over and samples the server's VmRSS until its stdin closes, then prints the
# slowest answer (s), the answers and the highest RSS (KiB): a process of its own, so that the test's
# thread sending 16 MiB does not delay its clock.
POLLER = """
import sys, threading, time, httpx
url, pid = sys.argv[1], sys.argv[2]
def rss():
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("VmRSS:")))
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
slowest, answers, peak = 0.0, 0, rss()
with httpx.Client(timeout=10) as client:
    print("ready", flush=True)
    while not done.is_set():
        started = time.perf_counter()
        assert client.get(url).status_code == 200
        slowest, answers, peak = max(slowest, time.perf_counter() - started), answers + 1, max(peak, rss())
        time.sleep(0.005)
print(slowest, answers, peak)
"""


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith(field + ":")))


def measure(gw: Gateway, path: str, body: bytes) -> Measured:
    """Post ``body`` while another process asks ``/healthz`` and samples the server's RSS."""
    pid = gw.process.pid
    before, hwm_before = status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM")
    poller = subprocess.Popen(
        [sys.executable, "-c", POLLER, f"{gw.url}/healthz", str(pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert poller.stdout is not None and poller.stdout.readline().strip() == "ready"
    time.sleep(0.05)
    started = time.perf_counter()
    resp = httpx.post(
        f"{gw.url}{path}", content=body, headers={**gw.auth, "Content-Type": "application/json"}, timeout=60
    )
    seconds = time.perf_counter() - started
    time.sleep(0.05)
    out, _ = poller.communicate("", timeout=30)
    slowest, answers, peak = out.split()
    growth = max(int(peak), status_kib(pid, "VmRSS"), before + status_kib(pid, "VmHWM") - hwm_before) - before
    error = resp.json().get("error", {}) if "json" in resp.headers.get("content-type", "") else {}
    return Measured(resp.status_code, error, seconds, growth, float(slowest), int(answers))


@pytest.mark.parametrize(("name", "path", "make", "param"), CASES, ids=[c[0] for c in CASES])
def test_a_list_over_its_bound_is_refused_at_the_bound(
    gw: Gateway, name: str, path: str, make: Callable[[], bytes], param: str
) -> None:
    body = make()
    assert BODY_LIMIT - 4096 < len(body) <= BODY_LIMIT, len(body)
    measure(gw, path, WARM)  # the endpoint's first request, and the process's first 16 MiB body
    got = measure(gw, path, body)
    print(
        f"\n{name}: {got.status} in {got.seconds:.3f} s, RSS +{got.rss_growth_kib / 1024:.1f} MiB, "
        f"/healthz max {got.healthz_max_s * 1000:.1f} ms over {got.healthz_answers}; {got.error.get('message')}"
    )
    assert got.status == 400, got
    if path == "/v1/messages":  # Anthropic's shape: no param, the message names the place
        assert set(got.error) == {"message", "type"}, got.error
        assert got.error["type"] == "invalid_request_error" and param in str(got.error["message"]), got.error
    else:
        assert set(got.error) == {"message", "type", "param", "code"}, got.error
        assert got.error["type"] == "invalid_request_error" and got.error["param"] == param, got.error
    assert got.rss_growth_kib <= MAX_RSS_GROWTH_KIB, got
    assert got.healthz_max_s <= MAX_HEALTHZ_S, got
    assert gw.process.poll() is None
