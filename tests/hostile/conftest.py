"""One gateway in front of a fake cloud for the hostile-input tests (starts in a few seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Gateway
from tests.fakes import FakeVLLM
from tests.faults._support import start_cloud_gateway

MAX_BODY_BYTES = 1 << 20


@pytest.fixture(scope="package")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with FakeVLLM() as fake:
        tables = f"[server]\nmax_body_bytes = {MAX_BODY_BYTES}\n"
        gw = start_cloud_gateway(tmp_path_factory.mktemp("hostile"), fake.url, tables=tables)
        yield gw
        gw.stop()
