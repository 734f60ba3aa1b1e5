"""Edge engines side by side: tokens/s and time to first token, raw engine vs the gateway's paths.

Method
------
* One prompt (an essay request that runs far past the token budget at temperature 0, so every request
  makes exactly ``--max-tokens`` tokens), greedy decoding, SmolLM2-135M-Instruct in every engine: the
  shipped Q4_1 GGUF for llama.cpp, the ``tiergate models export-onnx`` folder (fp32 and INT8) for ONNX
  Runtime.  Every engine runs with the gateway's default threads (cores - 1).
* Per engine, three ways in:
  - ``raw``: the engine's own token loop in a plain thread, nothing of tiergate's around it
    (llama-cpp-python: ``Llama.generate`` + ``detokenize``; ONNX Runtime: ``InferenceSession.run`` with
    the KV cache fed back + argmax + ``Tokenizer.decode``);
  - ``tier``: the gateway's edge tier object (``EdgeRegistry``: the registry, its instance set, and the
    ``LlamaCppTier`` / ``OnnxTier`` engine instance) in this process, via ``generate``;
  - ``http``: a real ``tiergate serve`` child process (cloud off, result cache off so that every request
    runs on the engine, auth in open mode), streamed over loopback with ``stream_options.include_usage``.
* Concurrency c (1 and 4): c requests start together; an engine serves one at a time (FIFO), so for
  ``raw`` the c requests run back to back in one thread and their TTFT counts from the common start,
  exactly what a client of the queued tier sees.  tokens/s = all tokens made / wall time of the batch.
* Prompt-prefix reuse (llama.cpp tier): a ~300-token system prompt shared by every question, and an
  unrelated short request before each question, so the engine's live context no longer starts with the
  system prompt.  Time to first token of the questions with ``prefix_cache_mb`` on (the state saved after
  the first question is restored) and off (the whole prompt is evaluated again), same instance settings,
  questions alternating between the two tiers; plus the same questions back to back (llama-cpp-python's
  own reuse of the live context) for reference.  Medians over ``--prefix-questions`` questions.
* Rounds: every (engine, path, c) cell is measured once per round, cells interleaved, the order of the
  paths within an (engine, c) group rotating from round to round (raw first, then tier first, ...),
  ``--repeats`` rounds; the table shows medians over rounds (TTFT: median over all requests).  The
  machine is shared, so read the ratios rather than absolute numbers: ``vs raw`` is median / median,
  ``paired`` the median over rounds of (this path / the raw engine in the same round), the steadier one.

    .venv/bin/python -m bench.edge [--repeats 3] [--max-tokens 64] [--concurrency 1,4] [--skip-http]
                                   [--prefix-questions 8] [--skip-prefix] [--n-gpu-layers auto|N]

``--n-gpu-layers`` is ``edge.n_gpu_layers`` for every llama.cpp path (raw too): ``auto``, the default, puts
all layers on the GPU with a CUDA build where llama.cpp sees one (docs/edge.md, "The edge on a GPU").

Prints a table and writes bench/results/edge.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tiers import Finished, Generation, TextDelta, collect
from tiers._gpu import GpuLayers, placement
from tiers.edge import EdgeConfig, EdgeRegistry, LlamaCppTier, default_threads, shipped_model_path
from tiers.edge._onnx import FP32_FILE, INT8_FILE, ChatPrompt, DecoderShape, choose_providers

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "edge.json"
CACHE = Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser()
ONNX_DIR = CACHE / "models" / "smollm2-135m-onnx"
ESSAY = [{"role": "user", "content": "Write a very long essay about the history of Rome."}]
SYSTEM = " ".join(
    [
        "You are the assistant of a small travel agency in Lisbon. You answer questions about trips,",
        "hotels, trains, ferries and museums in Portugal and Spain. Keep answers short, friendly and",
        "factual; when you do not know something, say so and suggest calling the agency on weekdays",
        "between nine and six. Never invent prices, timetables or opening hours. Prefer trains over cars",
        "and buses, mention accessibility when it matters, and remind travellers that many museums",
        "close on Mondays.",
    ]
    * 3
)
QUESTIONS = [
    "How do I get from Lisbon to Porto?",
    "Which museum should I see first?",
    "Is Sintra worth a day trip?",
    "Can I take a ferry to Cacilhas?",
    "What is the best time to visit the Algarve?",
    "Do trains to Madrid run at night?",
    "Where can I rent a bicycle?",
    "Are the trams accessible for wheelchairs?",
]


@dataclass
class Batch:
    ttfts: list[float]
    tokens: int
    wall: float
    rejected: int = 0  # requests answered 429 (admission refused them): no TTFT, no tokens


@dataclass
class Cell:
    engine: str
    path: str
    concurrency: int
    batches: list[Batch] = field(default_factory=list)

    @property
    def engine_key(self) -> tuple[str, int]:
        return self.engine, self.concurrency


# -- raw engines ---------------------------------------------------------------------------------


def gpu_layers(text: str) -> GpuLayers:
    """``--n-gpu-layers``: ``auto`` (the edge's default) or a number of layers (-1: all, 0: the CPU)."""
    return "auto" if text == "auto" else int(text)


def gpu_toml(layers: GpuLayers) -> str:
    """The ``[edge]`` line that gives a gateway child the same GPU setting."""
    return f"n_gpu_layers = {json.dumps(layers)}\n"


class RawLlama:
    def __init__(self, n_gpu_layers: GpuLayers = "auto") -> None:
        import llama_cpp
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llama_cpp.llama_backend_init()
        self.llm = Llama(
            model_path=str(shipped_model_path()),
            n_ctx=2048,
            n_threads=default_threads(),
            n_gpu_layers=placement(n_gpu_layers).layers,  # where the tier would put it
            verbose=False,
        )
        text = self.llm._model.token_get_text
        formatter = Jinja2ChatFormatter(
            template=self.llm.metadata["tokenizer.chat_template"],
            eos_token=text(self.llm.token_eos()),
            bos_token=text(self.llm.token_bos()),
        )
        formatted = formatter(messages=ESSAY)
        self.prompt = self.llm.tokenize(
            formatted.prompt.encode(), add_bos=not formatted.added_special, special=True
        )

    def generate(self, max_tokens: int, first: Callable[[], None]) -> int:
        from llama_cpp import llama_vocab_is_eog

        vocab, made = self.llm._model.vocab, 0
        for token in self.llm.generate(self.prompt, temp=0.0, repeat_penalty=1.0):
            if llama_vocab_is_eog(vocab, token):
                break
            self.llm.detokenize([token])
            made += 1
            if made == 1:
                first()
            if made >= max_tokens:
                break
        return made


class RawOnnx:
    def __init__(self, file: str) -> None:
        import numpy as np
        import onnxruntime as ort

        self.np = np
        shape = DecoderShape.read(ONNX_DIR)
        options = ort.SessionOptions()
        options.intra_op_num_threads = default_threads()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(
            str(ONNX_DIR / file), options, providers=choose_providers(ort.get_available_providers())
        )
        chat = ChatPrompt(ONNX_DIR, shape)
        self.tokenizer = chat.tokenizer
        self.prompt = chat.ids(ESSAY)
        self.shape = shape
        self.names = [f"{i}.{kind}" for i in range(shape.layers) for kind in ("key", "value")]

    def generate(self, max_tokens: int, first: Callable[[], None]) -> int:
        np, shape = self.np, self.shape
        empty = np.zeros((1, shape.kv_heads, 0, shape.head_dim), dtype=np.float32)
        feed = {f"past_key_values.{n}": empty for n in self.names}
        feed["input_ids"] = np.asarray([self.prompt], dtype=np.int64)
        made = 0
        while made < max_tokens:
            logits, *cache = self.session.run(None, feed)
            token = int(logits[0, -1].argmax())
            if token in shape.eos_token_ids:
                break
            self.tokenizer.decode([token])
            made += 1
            if made == 1:
                first()
            feed = {f"past_key_values.{n}": c for n, c in zip(self.names, cache, strict=True)}
            feed["input_ids"] = np.asarray([[token]], dtype=np.int64)
        return made


async def raw_batch(engine: RawLlama | RawOnnx, concurrency: int, max_tokens: int) -> Batch:
    def run() -> Batch:
        start = time.perf_counter()
        ttfts: list[float] = []
        tokens = 0
        for _ in range(concurrency):
            tokens += engine.generate(max_tokens, lambda: ttfts.append(time.perf_counter() - start))
        return Batch(ttfts, tokens, time.perf_counter() - start)

    return await asyncio.to_thread(run)


# -- the gateway's tier objects and HTTP ---------------------------------------------------------


Messages = list[dict[str, str]]


async def tier_batch(
    tier: EdgeRegistry, concurrency: int, max_tokens: int, prompts: list[Messages] | None = None
) -> Batch:
    """``concurrency`` requests started together: the essay each, or ``prompts[i]`` for the i-th."""
    start = time.perf_counter()

    async def one(messages: Messages) -> tuple[float, int]:
        ttft, tokens = 0.0, 0
        async for event in tier.generate(Generation(messages=messages, max_tokens=max_tokens, temperature=0)):
            if isinstance(event, TextDelta) and not ttft:
                ttft = time.perf_counter() - start
            if isinstance(event, Finished):
                tokens = event.usage.completion_tokens
        return ttft, tokens

    results = await asyncio.gather(*(one(m) for m in prompts or [ESSAY] * concurrency))
    return Batch([r[0] for r in results], sum(r[1] for r in results), time.perf_counter() - start)


async def http_batch(
    client: httpx.AsyncClient,
    url: str,
    concurrency: int,
    max_tokens: int,
    prompts: list[Messages] | None = None,
) -> Batch:
    """As :func:`tier_batch`, streamed from a gateway at ``url``; 429s counted."""
    start = time.perf_counter()

    async def one(messages: Messages) -> tuple[float, int, int]:
        ttft, tokens = 0.0, 0
        body = {
            "model": "edge",
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
            if resp.status_code == 429:  # the edge's lane is full: counted, not raised
                await resp.aread()
                return 0.0, 0, 1
            resp.raise_for_status()
            async for line in resp.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if not ttft and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    ttft = time.perf_counter() - start
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
        return ttft, tokens, 0

    results = await asyncio.gather(*(one(m) for m in prompts or [ESSAY] * concurrency))
    served = [r[0] for r in results if not r[2]]
    return Batch(served, sum(r[1] for r in results), time.perf_counter() - start, sum(r[2] for r in results))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GatewayProcess:
    def __init__(self, tmp: Path, name: str, edge_toml: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / f"{name}.toml"
        # no keys (open mode) and no result cache: every request runs on the engine
        config.write_text(
            f'data_dir = "{tmp / name}"\n[edge]\n{edge_toml}\n[cloud]\nenabled = false\n'
            "[cache]\nenabled = false\n[auth]\nopen_mode = true\n"
        )
        tiergate = Path(sys.executable).with_name("tiergate")
        # python -m gateway where the package is on PYTHONPATH rather than installed (a GPU box's run)
        command = [str(tiergate)] if tiergate.exists() else [sys.executable, "-m", "gateway"]
        self.process = subprocess.Popen(
            [*command, "serve", "--config", str(config), "--port", str(self.port)],
            stdout=(tmp / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway on {self.port} exited")
            try:
                tiers = httpx.get(f"{self.url}/readyz", timeout=2).json()["tiers"]
                if any(t["name"] == "edge" and t["health"] == "ready" for t in tiers):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"gateway on {self.port} not ready")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


# -- prompt-prefix reuse ---------------------------------------------------------------------------


async def first_token_s(tier: LlamaCppTier, messages: list[dict[str, str]]) -> float:
    started = time.perf_counter()
    ttft = 0.0
    async for _ in tier.generate(Generation(messages=messages, max_tokens=2, temperature=0)):
        if not ttft:
            ttft = time.perf_counter() - started
    return ttft


async def prefix_reuse(questions: int) -> dict[str, Any]:
    saving = LlamaCppTier(EdgeConfig())
    plain = LlamaCppTier(EdgeConfig(prefix_cache_mb=0))
    await saving.start()
    await plain.start()
    hello = [{"role": "user", "content": "Say hello."}]
    times: dict[str, list[float]] = {"off": [], "saved_state": [], "live_context": []}
    prompt_tokens = 0
    try:
        await first_token_s(
            saving, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]
        )
        for n in range(questions):
            asking = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[n % 8]}]
            for name, tier in (("off", plain), ("saved_state", saving))[:: 1 if n % 2 else -1]:
                await first_token_s(tier, hello)  # the live context no longer starts with SYSTEM
                times[name].append(await first_token_s(tier, asking))
            await first_token_s(saving, asking)  # back to back: the live context is reused
            times["live_context"].append(await first_token_s(saving, asking))
        done = await collect(saving.generate(Generation(messages=asking, max_tokens=1, temperature=0)))
        prompt_tokens = done.usage.prompt_tokens
    finally:
        await saving.aclose()
        await plain.aclose()
    medians = {k: round(statistics.median(v) * 1000, 1) for k, v in times.items()}
    return {
        "prompt_tokens": prompt_tokens,
        "questions": questions,
        "ttft_ms_p50": medians,
        "speedup_saved_state": round(medians["off"] / medians["saved_state"], 2),
        "restores": saving.prefixes.hits,
    }


# -- the run -------------------------------------------------------------------------------------


def rotated(cells: list[Cell], group: int, by: int) -> list[Cell]:
    """Each (engine, concurrency) group of paths in an order that rotates every round, so no path is
    always the first to run after a switch of model."""
    out: list[Cell] = []
    for start in range(0, len(cells), group):
        block = cells[start : start + group]
        shift = by % len(block)
        out += block[shift:] + block[:shift]
    return out


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return f"{model}, {os.cpu_count()} cores, {platform.machine()}"


def summarise(cells: list[Cell]) -> list[dict[str, Any]]:
    rows = []
    raw: dict[tuple[str, int], Cell] = {c.engine_key: c for c in cells if c.path == "raw"}
    for cell in cells:
        tps = statistics.median(b.tokens / b.wall for b in cell.batches)
        ttft = statistics.median(t for b in cell.batches for t in b.ttfts)
        base_cell = raw.get(cell.engine_key)
        base = statistics.median(b.tokens / b.wall for b in base_cell.batches) if base_cell else None
        # the same round's raw run is the fairest baseline on a busy machine: median of per-round ratios
        paired = (
            statistics.median(
                (b.tokens / b.wall) / (r.tokens / r.wall)
                for b, r in zip(cell.batches, base_cell.batches, strict=True)
            )
            if base_cell
            else None
        )
        rows.append(
            {
                "engine": cell.engine,
                "path": cell.path,
                "concurrency": cell.concurrency,
                "tokens_per_s": round(tps, 2),
                "ttft_ms_p50": round(ttft * 1000, 1),
                "vs_raw": round(tps / base, 3) if base else None,
                "vs_raw_paired": round(paired, 3) if paired else None,
                "rounds": [round(b.tokens / b.wall, 2) for b in cell.batches],
            }
        )
    return rows


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--skip-http", action="store_true", help="no gateway processes (tier and raw only)")
    parser.add_argument("--engines", default="llamacpp,onnx-fp32,onnx-int8")
    parser.add_argument("--prefix-questions", type=int, default=8)
    parser.add_argument("--skip-prefix", action="store_true", help="no prompt-prefix reuse measurement")
    parser.add_argument(
        "--n-gpu-layers", type=gpu_layers, default="auto", help="edge.n_gpu_layers (llama.cpp)"
    )
    args = parser.parse_args(argv)
    gpu = args.n_gpu_layers
    levels = [int(c) for c in args.concurrency.split(",")]
    engines = args.engines.split(",")
    have_onnx = (ONNX_DIR / FP32_FILE).exists() and (ONNX_DIR / INT8_FILE).exists()
    if not have_onnx:
        print(f"no ONNX export at {ONNX_DIR}: ONNX rows skipped (run tiergate models export-onnx)")
        engines = [e for e in engines if not e.startswith("onnx")]

    configs = {
        # the serial engine, as the raw loop it is compared with (batching: bench/edge_batch.py)
        "llamacpp": (
            f'backend = "llamacpp"\nmax_sequences = 1\n{gpu_toml(gpu)}',
            EdgeConfig(max_sequences=1, n_gpu_layers=gpu),
        ),
        "onnx-fp32": (
            f'backend = "onnx"\nonnx_model_dir = "{ONNX_DIR}"',
            EdgeConfig(backend="onnx", onnx_model_dir=str(ONNX_DIR)),
        ),
        "onnx-int8": (
            f'backend = "onnx"\nonnx_model_dir = "{ONNX_DIR}"\nonnx_quantized = true',
            EdgeConfig(backend="onnx", onnx_model_dir=str(ONNX_DIR), onnx_quantized=True),
        ),
    }
    raws: dict[str, RawLlama | RawOnnx] = {}
    tiers: dict[str, EdgeRegistry] = {}
    gateways: dict[str, GatewayProcess] = {}
    tmp = Path(tempfile.mkdtemp(prefix="tiergate-bench-edge-"))
    paths = ["raw", "tier"] + ([] if args.skip_http else ["http"])
    cells = [Cell(e, p, c) for e in engines for c in levels for p in paths]
    try:
        for engine in engines:
            toml, config = configs[engine]
            raws[engine] = (
                RawLlama(gpu)
                if engine == "llamacpp"
                else RawOnnx(INT8_FILE if config.onnx_quantized else FP32_FILE)
            )
            tiers[engine] = EdgeRegistry(config)
            await tiers[engine].start()
            if not args.skip_http:
                gateways[engine] = GatewayProcess(tmp, engine, toml)
        for gw in gateways.values():
            gw.wait_ready()

        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=16)) as client:
            # one warm-up request per way in (first calls allocate and page in the weights)
            for engine in engines:
                await raw_batch(raws[engine], 1, 8)
                await tier_batch(tiers[engine], 1, 8)
                if engine in gateways:
                    await http_batch(client, gateways[engine].url, 1, 8)
            for round_no in range(args.repeats):
                for cell in rotated(cells, len(paths), round_no):
                    run: Awaitable[Batch]
                    if cell.path == "raw":
                        run = raw_batch(raws[cell.engine], cell.concurrency, args.max_tokens)
                    elif cell.path == "tier":
                        run = tier_batch(tiers[cell.engine], cell.concurrency, args.max_tokens)
                    else:
                        run = http_batch(client, gateways[cell.engine].url, cell.concurrency, args.max_tokens)
                    cell.batches.append(await run)
                print(f"round {round_no + 1}/{args.repeats} done", flush=True)
    finally:  # a failed run leaves no gateway behind
        for gw in gateways.values():
            gw.stop()
        for tier in tiers.values():
            await tier.aclose()

    prefix = None if args.skip_prefix else await prefix_reuse(args.prefix_questions)
    rows = summarise(cells)
    columns = [("engine", "<10"), ("path", "<5"), ("c", ">2"), ("tok/s", ">8"), ("TTFT p50 ms", ">12")]
    header = " ".join(f"{name:{fmt}}" for name, fmt in [*columns, ("vs raw", ">7"), ("paired", ">7")])
    print(f"\n{header}")
    for r in rows:
        ratio = f"{r['vs_raw']:.1%}" if r["vs_raw"] else ""
        paired = f"{r['vs_raw_paired']:.1%}" if r["vs_raw_paired"] else ""
        print(
            f"{r['engine']:<10} {r['path']:<5} {r['concurrency']:>2} {r['tokens_per_s']:>8.1f} "
            f"{r['ttft_ms_p50']:>12.1f} {ratio:>7} {paired:>7}"
        )
    if prefix is not None:
        ms = prefix["ttft_ms_p50"]
        print(
            f"\nprompt-prefix reuse, llama.cpp, {prefix['prompt_tokens']}-token prompt, TTFT p50: "
            f"off {ms['off']} ms, saved state {ms['saved_state']} ms ({prefix['speedup_saved_state']}x), "
            f"live context {ms['live_context']} ms"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "threads": default_threads(),
                "n_gpu_layers": gpu,
                "devices": {e: t.state().device for e, t in tiers.items()},
                "max_tokens": args.max_tokens,
                "repeats": args.repeats,
                "command": "python -m bench.edge " + " ".join(sys.argv[1:]),
                "rows": rows,
                "prefix_reuse": prefix,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
