"""bench/cpu_per_request.py's arithmetic: the per-round comparison and the folding of py-spy's
collapsed stacks into self and cumulative shares (the benchmark itself runs in bench/, never here)."""

from __future__ import annotations

import pytest

from bench import cpu_per_request as cpr

P = 'process 12:"python -m gateway serve"'
STACKS = [
    # py-spy --format raw --function --threads --subprocesses: "process;thread;frame;... count"
    f"{P};thread (12): MainThread;run (uvloop/__init__.py:100);handle (gateway/chat.py:10);"
    "encode (msgspec/__init__.py:5) 6",
    f"{P};thread (12): MainThread;run (uvloop/__init__.py:100);handle (gateway/chat.py:10) 2",
    # a recursive frame counts once in the cumulative count of its stack
    f"{P};thread (0x1A): ledger-db_0;walk (router/_features.py:3);walk (router/_features.py:3) 2",
    "",
]


def test_fold_counts_self_and_cumulative_once_per_stack() -> None:
    folded = cpr.fold(STACKS)
    assert folded.total == 10
    assert folded.own == {
        "encode (msgspec/__init__.py:5)": 6,
        "handle (gateway/chat.py:10)": 2,
        "walk (router/_features.py:3)": 2,
    }
    assert folded.cumulative["run (uvloop/__init__.py:100)"] == 8
    assert folded.cumulative["handle (gateway/chat.py:10)"] == 8
    assert folded.cumulative["walk (router/_features.py:3)"] == 2
    assert folded.threads == {"12 MainThread": 8, "26 ledger-db_0": 2}


def test_fold_weights_each_threads_samples_by_its_cpu() -> None:
    # /proc: the event loop used 0.9 s, the ledger thread 0.05 s (py-spy saw it busy 2 in 10),
    # and thread 30 ran 0.05 s without ever being sampled busy
    folded = cpr.fold(STACKS, {12: 0.9, 26: 0.05, 30: 0.05})
    assert folded.total == pytest.approx(1.0)
    assert folded.own["encode (msgspec/__init__.py:5)"] == pytest.approx(0.9 * 6 / 8)
    assert folded.own["walk (router/_features.py:3)"] == pytest.approx(0.05)
    assert folded.own["[thread 30, not sampled]"] == pytest.approx(0.05)
    assert folded.cumulative["run (uvloop/__init__.py:100)"] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("frame", "area"),
    [
        ("handle (gateway/chat.py:10)", "gateway/chat"),
        ("write (/tmp/x/candidate-2a89334/gateway/pipeline/chat.py:1)", "gateway/pipeline/chat"),
        ("send (/work/main/.venv/lib/python3.11/site-packages/aiohttp/client.py:9)", "aiohttp"),
        ("encode (msgspec/__init__.py:5)", "msgspec"),
        ("_run_once (asyncio/base_events.py:1)", "asyncio"),
        ("dumps (/usr/lib/python3.11/json/__init__.py:2)", "json"),
        ("<module> (gateway/__init__.py:1)", "gateway/__init__"),
        ("Runner.run (asyncio/runners.py:86)", "uvloop (C, the event loop itself)"),
    ],
)
def test_frame_area(frame: str, area: str) -> None:
    assert cpr.frame_area(frame) == area


def test_profile_report_gives_shares_and_microseconds_per_request() -> None:
    text = cpr.profile_report(STACKS, us_per_request=500.0, header=["head"])
    assert text.startswith("head\n")
    sections = {part.split("\n", 1)[0]: part.split("\n")[1:] for part in text.split("== ")[1:]}
    assert sections["by thread"][0].split() == ["80.0", "%", "400.0", "us", "12", "MainThread"]
    area = "by area (self time summed by package, or by module for the project's own code)"
    assert sections[area][0].split() == ["60.0", "%", "300.0", "us", "msgspec"]
    cumulative = sections[
        "top functions by cumulative time (the function and what it calls; not the entry chain)"
    ]
    # run and handle are on every stack of the heaviest thread (the entry chain): left out
    assert [line.split()[-2] for line in cumulative if line] == ["encode", "walk"]


def test_compare_pairs_the_rounds() -> None:
    got = cpr.compare([1.0, 2.0, 1.0], [1.1, 1.8, 1.0])
    assert got["ratio"] == pytest.approx(1.1)  # medians 1.0 and 1.1
    assert got["round_ratio_min"] == pytest.approx(0.9)
    assert got["round_ratio_max"] == pytest.approx(1.1)
    assert got["round_ratio_median"] == pytest.approx(1.0)
    summary = cpr.summarize([0.4, 0.5, 0.45])
    assert summary["median"] == 0.45 and summary["spread_pct"] == pytest.approx(100 * 0.1 / 0.45)
