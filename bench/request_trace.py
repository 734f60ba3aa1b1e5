"""One request's path through the gateway: which of the project's source files it enters, how often
it comes back to a file it had already left, and (for a stream) how many nested async generators of
the project each streamed event passes.

Method
------
* The real app (``gateway.app.create_app``) with its default settings, except: a temporary data
  folder, the tiers replaced by stand-ins that answer at once (``bench/_asgi_ab.py``'s
  ``InstantTier``, one named ``edge`` and one ``cloud``), so no model, network or process is
  involved, and the learner's background refit held (``router.predictor.refit_interval_s = 1e9``,
  as in ``bench/cpu_per_request.py``: at its default, once per 30 s, it would land in one traced
  request or another at random).  Key auth as configured by default (the first run's tenant key
  from the data folder), ledger on, exact result cache on.  The request is a one-line chat
  question with ``temperature: 0`` (so the cache looks it up) to ``tiergate-auto``, the router's
  choice (``--model cloud``: a named tier, no routing choice).  The app is driven as an ASGI
  callable in this process (its lifespan run first, as a server would): nothing but the public
  app and the ASGI protocol is assumed, so this stays valid while ``gateway/`` is restructured.
  ``receive`` gives the body, then waits until the response has ended and says
  ``http.disconnect``, as uvicorn does.
* Warm-up: ``--warmup`` requests of every case first, untraced (imports, first-time caches,
  connection set-up), then the loop is let run until idle.
* Cases: ``json-miss`` (a non-streamed chat request the cache has not seen: each traced request
  asks a new question), ``stream-miss`` (the same, streamed), ``json-hit`` (a non-streamed
  request asked once before, untraced, so the cache answers it).
* Tracing: ``sys.setprofile`` is set just before the request is handed to the app and removed when
  it has ended and every task created during it has finished.  Only "call" events count (a
  function entered, or a coroutine or generator resumed), and only those in the request's own
  tasks: the task the request runs in and every task created while it ran (a stream's watch for
  the client leaving, say: its calls fall into the sequence where the loop ran them); tasks that
  existed before (the ledger's writer, timers, ...) and callbacks outside any task are left out.
  A call counts when its code's file is under ``gateway/``, ``router/``, ``tiers/`` or ``cache/``.
* The *sequence* is those calls' files in order, consecutive repeats of one file merged into one
  entry: ``chat.py, admission.py, chat.py, record.py, admission.py`` for a request that entered
  chat.py, then admission.py, then (called again or resumed) chat.py and so on.  Returning from a
  call is not an entry: only where control is *entered* is recorded.
* **Files entered** = the number of distinct files in the sequence.
* **Returns to a file already left** = the number of entries of the sequence, after the first,
  whose file appears earlier in the sequence (by construction not as the immediately previous
  entry, as repeats are merged).  In the example above: 2 (``chat.py`` at the third entry,
  ``admission.py`` at the fifth).  Every case is counted the same way.
* **Async generators per streamed event** (streams): each time the stand-in tier's ``generate``
  yields an event (a "return" event of its frame in the profiler, which it gets at every
  ``yield``), the stack above it is walked (``frame.f_back``: an async generator resumed by
  ``async for`` in another has that one's frame below it) up to the frame that sends the
  response, and the distinct code objects of project files that are async generators
  (``CO_ASYNC_GENERATOR``) are counted, with their files.  The figure given is the most any one
  event passed, and whether the framing (``gateway/api/``) was among them, i.e. the event reached
  the framing in the same pass.  If some generator ran in another task (a queue between them),
  the walk stops at that task's bottom, and it shows as a smaller count.
* ``--repeats``: the traced request is repeated (a new question each time for the misses); the
  figures of every repeat are kept, and the table gives the median (the path is deterministic,
  so they normally agree).

    .venv/bin/python -m bench.request_trace [--case json-miss|stream-miss|json-hit|all] [--repeats 3]
        [--model tiergate-auto|cloud] [--files]

Prints a table (``--files``: also each case's sequence) and writes bench/results/request_trace.json
(``--output``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import inspect
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import msgspec

from bench._asgi_ab import InstantTier, lifespan

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "request_trace.json"
PARTS = ("gateway", "router", "tiers", "cache")  # the project's source: a file under one of these
PROJECT = tuple(str(ROOT / part) + "/" for part in PARTS)
FRAMING = "gateway/api/"  # where events become bytes: an event that reaches it is framed in that pass
CASES = ("json-miss", "stream-miss", "json-hit")
PATH = "/v1/chat/completions"


class InstantEdge(InstantTier):
    name = "edge"


TIER_CODE = InstantTier.generate.__code__  # the stand-in's generator: each yield is an event


def relative(filename: str) -> str:
    return str(Path(filename).relative_to(ROOT))


def is_project(filename: str) -> bool:
    return filename.startswith(PROJECT)


# ---------------------------------------------------------------------------- counting


def returns(sequence: Sequence[str]) -> int:
    """Entries after the first whose file appears earlier in ``sequence`` (repeats merged)."""
    seen: set[str] = set()
    count = 0
    for file in sequence:
        if file in seen:
            count += 1
        seen.add(file)
    return count


def merged(files: Sequence[str]) -> list[str]:
    """Consecutive repeats merged into one entry."""
    return [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]


@dataclass
class Trace:
    """What one traced request did."""

    sequence: list[str] = field(default_factory=list)  # files entered, repeats merged
    calls: collections.Counter[str] = field(default_factory=collections.Counter)  # call events by file
    # for each event the stand-in tier yielded: the project's async generators on the stack
    event_generators: list[list[str]] = field(default_factory=list)
    status: int = 0
    body: bytes = b""
    seconds: float = 0.0

    def figures(self) -> dict[str, Any]:
        entries = collections.Counter(self.sequence)
        out: dict[str, Any] = {
            "files_entered": len(entries),
            "returns": returns(self.sequence),
            "sequence_length": len(self.sequence),
            "call_events": sum(self.calls.values()),
            "entries_by_file": dict(entries.most_common()),
        }
        if self.event_generators:
            deepest = max(self.event_generators, key=len)
            out["generators_per_event"] = [len(g) for g in self.event_generators]
            out["generators_max"] = len(deepest)
            out["generator_files_max"] = len({name.split(":")[0] for name in deepest})
            out["generators_deepest"] = deepest
            out["reaches_framing"] = any(name.startswith(FRAMING) for name in deepest)
        return out


class Tracer:
    """A ``sys.setprofile`` hook recording the request's own project calls (see the module doc)."""

    def __init__(self, background: set[asyncio.Task[Any]], bottom: Callable[[FrameType], bool]) -> None:
        self.background = background
        self.bottom = bottom  # the frame the event walk stops at (the request's outermost frame)
        self.files: list[str] = []
        self.calls: collections.Counter[str] = collections.Counter()
        self.event_generators: list[list[str]] = []
        self._names: dict[Any, str | None] = {}  # code object -> relative file, None if not ours

    def _file(self, code: Any) -> str | None:
        try:
            return self._names[code]
        except KeyError:
            name = relative(code.co_filename) if is_project(code.co_filename) else None
            self._names[code] = name
            return name

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            file = self._file(frame.f_code)
            if file is None:
                return
            task = asyncio.current_task()
            if task is None or task in self.background:
                return
            self.calls[file] += 1
            if not self.files or self.files[-1] != file:
                self.files.append(file)
        elif event == "return" and frame.f_code is TIER_CODE and arg is not None:
            self.event_generators.append(self._generators_above(frame))

    def _generators_above(self, frame: FrameType) -> list[str]:
        found: dict[Any, str] = {}
        walk = frame.f_back
        while walk is not None and not self.bottom(walk):
            code = walk.f_code
            file = self._file(code)
            if file is not None and code.co_flags & inspect.CO_ASYNC_GENERATOR:
                found.setdefault(code, f"{file}:{code.co_qualname}")
            walk = walk.f_back
        return list(reversed(found.values()))  # outermost (the framing's) first


# ---------------------------------------------------------------------------- the app


def body(question: str, stream: bool, model: str) -> bytes:
    return msgspec.json.encode(
        {
            "model": model,
            "messages": [{"role": "user", "content": question}],
            "max_tokens": 8,
            "temperature": 0,  # deterministic: the result cache looks it up
            "stream": stream,
        }
    )


async def call(app: Any, payload: bytes, key: str) -> tuple[int, bytes]:
    """One POST through the app as a server would make it; (status, body)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8080"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"authorization", f"Bearer {key}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    ended = asyncio.Event()
    sent_body = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await ended.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                ended.set()

    try:
        await app(scope, receive, send)
    finally:
        ended.set()
    return status, b"".join(chunks)


async def idle(rounds: int = 20) -> None:
    """Let the loop run what is pending (deferred writes, callbacks)."""
    for _ in range(rounds):
        await asyncio.sleep(0.005)


async def traced(app: Any, payload: bytes, key: str) -> Trace:
    await idle()
    background = set(asyncio.all_tasks())
    trace = Trace()
    codes = {call.__code__}

    def bottom(frame: FrameType) -> bool:
        return frame.f_code in codes

    tracer = Tracer(background, bottom)

    async def request() -> tuple[int, bytes]:
        sys.setprofile(tracer)
        try:
            return await call(app, payload, key)
        finally:
            sys.setprofile(None)

    started = time.perf_counter()
    task = asyncio.ensure_future(request())
    background.discard(task)
    trace.status, trace.body = await task
    trace.seconds = time.perf_counter() - started
    # tasks the request started that are still running (a deferred write, say) are its own work
    spawned = [t for t in asyncio.all_tasks() if t not in background and t is not asyncio.current_task()]
    if spawned:
        sys.setprofile(tracer)
        try:
            await asyncio.wait(spawned, timeout=5)
        finally:
            sys.setprofile(None)
    trace.sequence = tracer.files
    trace.calls = tracer.calls
    trace.event_generators = tracer.event_generators
    return trace


async def measure(cases: Sequence[str], repeats: int, warmup: int, model: str) -> dict[str, list[Trace]]:
    from gateway.app import create_app
    from gateway.settings import load_settings

    data = Path(tempfile.mkdtemp(prefix="tiergate-trace-"))
    settings = load_settings(environ={}, data_dir=str(data), **{"router.predictor.refit_interval_s": 1e9})
    app = create_app(settings, tiers={"edge": InstantEdge(), "cloud": InstantTier()})
    inbox, task = await lifespan(app)
    counter = iter(range(1_000_000))
    results: dict[str, list[Trace]] = {case: [] for case in cases}
    try:
        key = json.loads((data / "initial-credentials.json").read_text())["tenant_key"]
        for case in CASES:  # every case warms, whichever is traced
            for _ in range(warmup):
                payload = body(f"Warm-up question {next(counter)}?", case == "stream-miss", model)
                status, _ = await call(app, payload, key)
                if status != 200:
                    raise RuntimeError(f"warm-up request answered {status}")
        for _ in range(repeats):
            for case in cases:
                question = f"What is the capital of country number {next(counter)}?"
                payload = body(question, case == "stream-miss", model)
                if case == "json-hit":
                    await call(app, payload, key)  # asked once, untraced: the traced one is a hit
                trace = await traced(app, payload, key)
                if trace.status != 200:
                    raise RuntimeError(f"{case}: answered {trace.status}: {trace.body[:300]!r}")
                results[case].append(trace)
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(task, 30)
    return results


# ---------------------------------------------------------------------------- report


def commit() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", *PARTS],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "?"
    return head + (" + changes" if dirty else "")


def summary(traces: Sequence[Trace]) -> dict[str, Any]:
    figures = [t.figures() for t in traces]
    out: dict[str, Any] = {
        key: statistics.median(f[key] for f in figures)
        for key in ("files_entered", "returns", "sequence_length", "call_events")
    }
    out["per_repeat"] = [{k: f[k] for k in ("files_entered", "returns")} for f in figures]
    last = figures[-1]
    out["entries_by_file"] = last["entries_by_file"]
    out["sequence"] = traces[-1].sequence
    if "generators_max" in last:
        for key in ("generators_max", "generator_files_max"):
            out[key] = statistics.median(f[key] for f in figures)
        for key in ("generators_per_event", "generators_deepest", "reaches_framing"):
            out[key] = last[key]
    return out


def table(report: dict[str, Any], files: bool = False) -> str:
    lines = [
        f"one request through the app in process (instant stand-in tiers), commit {report['commit']}, "
        f"model {report['model']}; median of {report['repeats']} traced requests per case",
        f"{'case':<12} {'files entered':>13} {'returns':>8} {'entries':>8} {'calls':>7} "
        f"{'async gens/event':>17}  most entered",
    ]
    for case, row in report["cases"].items():
        gens = (
            f"{row['generators_max']:g} in {row['generator_files_max']:g} files"
            if "generators_max" in row
            else ""
        )
        top = ", ".join(f"{Path(f).name} {n}" for f, n in list(row["entries_by_file"].items())[:4])
        lines.append(
            f"{case:<12} {row['files_entered']:>13g} {row['returns']:>8g} {row['sequence_length']:>8g} "
            f"{row['call_events']:>7g} {gens:>17}  {top}"
        )
    for case, row in report["cases"].items():
        if "generators_deepest" in row:
            lines.append(f"\n{case}: the project's async generators an event passes (outermost first):")
            lines += [f"  {name}" for name in row["generators_deepest"]]
        if files:
            lines.append(f"\n{case}: sequence of files entered ({len(row['sequence'])} entries):")
            lines += [f"  {name}" for name in row["sequence"]]
    return "\n".join(lines)


def run(
    cases: Sequence[str], repeats: int = 3, warmup: int = 20, model: str = "tiergate-auto"
) -> dict[str, Any]:
    traces = asyncio.run(measure(cases, repeats, warmup, model))
    return {
        "method": __doc__,
        "command": " ".join(["python -m bench.request_trace", *sys.argv[1:]]),
        "commit": commit(),
        "python": sys.version.split()[0],
        "model": model,
        "repeats": repeats,
        "warmup": warmup,
        "cases": {case: summary(traces[case]) for case in cases},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=(*CASES, "all"), default="all")
    parser.add_argument("--repeats", type=int, default=3, help="traced requests per case")
    parser.add_argument("--warmup", type=int, default=20, help="untraced requests per case first")
    parser.add_argument("--model", default="tiergate-auto", help="the request's model [default: %(default)s]")
    parser.add_argument("--files", action="store_true", help="also print each case's sequence of files")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    cases = CASES if args.case == "all" else (args.case,)
    report = run(cases, args.repeats, args.warmup, args.model)
    print(table(report, args.files))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
