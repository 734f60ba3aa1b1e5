"""Log lines: one JSON object each, carrying the id of the request they were written for."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from gateway.ops.logs import REQUEST_ID, handler


def capture(fmt: str) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    logger = logging.getLogger(f"test.logs.{fmt}")
    logger.handlers[:] = [handler(fmt, out)]  # type: ignore[arg-type]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, out


def test_json_lines_carry_the_request_id_of_their_task_and_extra_fields() -> None:
    logger, out = capture("json")

    async def request(rid: str) -> None:
        REQUEST_ID.set(rid)
        logger.info("start %s", rid)
        await asyncio.sleep(0.01)  # the other request runs in between
        await asyncio.create_task(inner())  # a task started by the request inherits its id

    async def inner() -> None:
        logger.warning("inner", extra={"tier": "edge"})

    async def main() -> None:
        await asyncio.gather(request("req-a"), request("req-b"))

    asyncio.run(main())
    logger.info("outside any request")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 5
    for rid in ("req-a", "req-b"):
        mine = [line for line in lines if line.get("request_id") == rid]
        assert [m["message"] for m in mine] == [f"start {rid}", "inner"]
        assert mine[1]["tier"] == "edge" and mine[1]["level"] == "WARNING"
    assert "request_id" not in lines[-1]
    assert lines[-1]["logger"] == "test.logs.json" and lines[-1]["ts"].endswith("Z")


def test_exceptions_are_one_json_line() -> None:
    logger, out = capture("json")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    (line,) = out.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["message"] == "failed" and "ValueError: boom" in entry["exception"]


def test_text_lines_show_the_request_id_in_brackets() -> None:
    logger, out = capture("text")
    token = REQUEST_ID.set("req-c")
    logger.info("hello")
    REQUEST_ID.reset(token)
    logger.info("bye")
    first, second = out.getvalue().splitlines()
    assert "[req-c]: hello" in first
    assert "[" not in second.split(" INFO ")[1]
