"""One gateway in front of a fake cloud for the hostile-input tests (starts in a few seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Gateway
from tests.fakes import FakeVLLM
from tests.faults._support import start_cloud_gateway

MAX_BODY_BYTES = 1 << 20
MEDIA_IN_FLIGHT = 8  # media parts prepared at once, all requests together
# The fake cloud declares every ability but logit_bias (a request needing it has no tier to go to).
CLOUD_ABILITIES = 'abilities = ["tools", "json_object", "json_schema", "logprobs", "n"]\n'
ALIASES = (
    '[aliases]\n"gpt-4o-mini" = "cloud"\nfast = { model = "tiergate-auto", strategy = "always:cloud" }\n'
)


@pytest.fixture(scope="package")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with FakeVLLM() as fake:
        tables = (
            f"[server]\nmax_body_bytes = {MAX_BODY_BYTES}\n[media]\nmax_in_flight = {MEDIA_IN_FLIGHT}\n"
            + ALIASES
        )
        gw = start_cloud_gateway(tmp_path_factory.mktemp("hostile"), fake.url, CLOUD_ABILITIES, tables)
        yield gw
        gw.stop()
