"""Start-up freezes its long-lived objects out of the cyclic collector (gateway/app.py)."""

from __future__ import annotations

import gc
from pathlib import Path

from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import load_settings
from tests.fakes import FakeVLLM


def test_start_up_objects_are_frozen_and_a_full_collection_then_walks_few(tmp_path: Path) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with FakeVLLM("ok") as fake:
        overrides = {"edge.enabled": False, "cloud.urls": [fake.url], "auth.open_mode": True}
        settings = load_settings(environ={}, data_dir=str(tmp_path), **overrides)
        with TestClient(create_app(settings)) as client:
            assert client.get("/healthz").status_code == 200
            frozen = gc.get_freeze_count()
            assert frozen > 50_000  # the libraries and the app: what a full collection no longer walks
            assert len(gc.get_objects(generation=2)) < frozen / 2
