"""Bounded runs of the request-parser fuzz target (fuzz/request_parser.py): under atheris (libFuzzer,
coverage-guided) and under Hypothesis (structured: JSON built from the protocol's own field names).
Every input must parse or be a 400 in OpenAI's shape; nothing else may escape."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "fuzz" / "request_parser.py"
SEEDS = ROOT / "fuzz" / "seeds" / "request_parser"
# A longer hunt: TG_FUZZ_RUNS=1000000 python -m pytest tests/fuzz -k atheris
RUNS = int(os.environ.get("TG_FUZZ_RUNS", "4000"))


def _target() -> Any:
    spec = importlib.util.spec_from_file_location("request_parser_fuzz", TARGET)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _target().check


@pytest.mark.parametrize("seed", sorted(SEEDS.iterdir()), ids=lambda p: p.name)
def test_every_seed_passes_the_check(seed: Path) -> None:
    check(seed.read_bytes())


def test_atheris_finds_no_crash_in_a_bounded_run(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    done = subprocess.run(
        [
            sys.executable,
            str(TARGET),
            f"-runs={RUNS}",
            "-seed=12345",
            "-max_len=4096",
            str(tmp_path),
            str(SEEDS),
        ],
        capture_output=True,
        text=True,
        timeout=max(240, RUNS / 200),
        cwd=tmp_path,  # crash-* files, if any, land here
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"Done {RUNS} runs" in done.stderr


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url", "input_audio", "video_url", "other"])},
    optional={
        "text": _json,
        "image_url": st.fixed_dictionaries({"url": _json}, optional={"detail": _json}),
        "input_audio": st.fixed_dictionaries({"data": _json, "format": _json}),
        "video_url": st.fixed_dictionaries({"url": _json}),
    },
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "robot"])},
    optional={
        "content": st.one_of(st.text(max_size=30), st.none(), st.lists(_part, max_size=3), _json),
        "name": _json,
    },
)
_request = st.fixed_dictionaries(
    {"model": st.sampled_from(["tiergate-auto", "edge", "cloud"]) | st.text(max_size=5)},
    optional={
        "messages": st.lists(_message, max_size=4) | _json,
        **{
            name: _json | st.integers(min_value=-3, max_value=5000) | st.floats(min_value=-3, max_value=3)
            for name in (
                "max_tokens",
                "max_completion_tokens",
                "temperature",
                "top_p",
                "n",
                "seed",
                "presence_penalty",
                "frequency_penalty",
            )
        },
        "stream": _json,
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": _json}) | _json,
        "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=6) | _json,
        "user": _json,
    },
)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.one_of(_request.map(msgspec.json.encode), st.binary(max_size=200)))
def test_hypothesis_structured_requests_parse_or_are_400(body: bytes) -> None:
    check(body)
