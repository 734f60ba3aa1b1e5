"""A stored response survives the gateway being killed right after its answer: ``store: true`` writes it
ahead (a write-ahead file, then the database in batches; gateway/accounts/held_responses.py), and the
next start loads what the killed run left.  A real gateway process, the real llama.cpp edge, the
official client, ``kill -9``; the flush interval is an hour, so every response is only in the file
when the process dies."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.conftest import start_gateway

CONFIG = "[responses]\nflush_interval_s = 3600.0\n"


def test_stored_responses_survive_kill_9(tmp_path: Path) -> None:
    gateway = start_gateway(tmp_path, CONFIG)
    client = gateway.client(default_headers={"Cache-Control": "no-cache"}, timeout=120)
    answered = []
    try:
        previous = None
        for question in ("My name is Ada. Say hi.", "Say yes.", "What is my name?"):
            response = client.responses.create(
                model="edge", input=question, max_output_tokens=4, previous_response_id=previous
            )
            answered.append(response)
            previous = response.id
        assert client.responses.retrieve(answered[-1].id).id == answered[-1].id  # held: readable at once
    finally:
        os.kill(gateway.process.pid, signal.SIGKILL)
        gateway.process.wait(30)
    assert list((gateway.data_dir / "responses-wal").glob("segment-*.jsonl")), "nothing was written ahead"

    restarted = start_gateway(tmp_path, CONFIG)
    try:
        client = restarted.client(default_headers={"Cache-Control": "no-cache"}, timeout=120)
        for response in answered:
            again = client.responses.retrieve(response.id)
            assert again.output_text == response.output_text
        more = client.responses.create(
            model="edge", input="And again?", max_output_tokens=4, previous_response_id=answered[-1].id
        )
        assert more.previous_response_id == answered[-1].id
        assert more.usage.input_tokens > answered[-1].usage.input_tokens  # the whole chain came back
        assert "loaded 3 stored responses" in restarted.log()
    finally:
        restarted.stop()
