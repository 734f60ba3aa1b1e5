from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import SettingsError, load_settings


def test_defaults() -> None:
    settings = load_settings(environ={})
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8080)
    assert settings.cloud.urls == []


def test_file_then_environment_then_overrides(tmp_path: Path) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(
        'data_dir = "/srv/tg"\n[server]\nport = 9000\nhost = "0.0.0.0"\n[edge]\nmax_queue = 3\n'
    )
    env = {"TIERGATE_SERVER__PORT": "9100", "TIERGATE_CLOUD__URLS": "http://a:8000, http://b:8000"}
    settings = load_settings(config, environ=env, **{"server.host": "127.0.0.2"})
    assert settings.data_dir == "/srv/tg"
    assert settings.server.port == 9100
    assert settings.server.host == "127.0.0.2"
    assert settings.edge.max_queue == 3
    assert settings.cloud.urls == ["http://a:8000", "http://b:8000"]


def test_json_lists_in_environment() -> None:
    settings = load_settings(environ={"TIERGATE_CLOUD__LOCAL__EXTRA_ARGS": '["--dtype", "float32"]'})
    assert settings.cloud.local.extra_args == ["--dtype", "float32"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TIERGATE_SERVER__PROT": "1"}, "prot"),
        ({"TIERGATE_SERVER__PORT": "eighty"}, "server.port"),
    ],
)
def test_mistakes_are_errors_that_name_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(environ=env)


def test_unreadable_file_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(SettingsError, match="cannot read config file"):
        load_settings(bad, environ={})
