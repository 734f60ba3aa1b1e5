from __future__ import annotations

from pathlib import Path

import pytest

from gateway.services import build_tiers
from gateway.settings import SettingsError, load_settings
from tiers.cloud import CloudConfig
from tiers.edge import EdgeConfig


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


def test_tenant_limits_storage_and_prices(tmp_path: Path) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(
        '[storage]\ndatabase_url = "postgresql+psycopg://u@h/db"\n'
        '[[pricing.prices]]\ntier = "cloud"\nmodel = "big"\nprompt_per_1k = 0.01\n'
    )
    env = {"TIERGATE_LIMITS__DEFAULT__REQUESTS_PER_MIN": "60", "TIERGATE_AUTH__OPEN_MODE": "true"}
    settings = load_settings(config, environ=env)
    assert settings.limits.default.requests_per_min == 60 and settings.auth.open_mode is True
    assert settings.database_url == "postgresql+psycopg://u@h/db"
    assert [(p.tier, p.model, p.prompt_per_1k) for p in settings.pricing.prices] == [("cloud", "big", 0.01)]
    default = load_settings(environ={"TIERGATE_DATA_DIR": str(tmp_path)})
    assert default.database_url == f"sqlite:///{tmp_path / 'tiergate.db'}"
    with pytest.raises(SettingsError, match="requests_per_hour"):
        load_settings(environ={"TIERGATE_LIMITS__DEFAULT__REQUESTS_PER_HOUR": "1"})


def test_more_tiers_are_named_in_configuration(tmp_path: Path) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(
        '[tiers.onnx]\nkind = "edge"\nbackend = "onnx"\nquality = 0.3\n'
        '[tiers.gpu]\nkind = "cloud"\nurls = ["http://127.0.0.1:9"]\nquality = 0.9\n'
    )
    settings = load_settings(config, environ={})
    configs = settings.tier_configs()
    assert list(configs) == ["edge", "cloud", "onnx", "gpu"]
    assert isinstance(configs["onnx"], EdgeConfig) and configs["onnx"].backend == "onnx"
    assert configs["onnx"].onnx_model_dir  # filled from the build cache, as [edge]'s is
    assert isinstance(configs["gpu"], CloudConfig) and not configs["gpu"].local.enabled
    tiers = build_tiers(settings)
    assert {name: tier.name for name, tier in tiers.items()} == {n: n for n in configs}
    assert tiers["gpu"].capabilities.quality == 0.9


@pytest.mark.parametrize(
    ("table", "why"),
    [
        ('[tiers.cloud]\nkind = "cloud"\n', "taken"),
        ('[tiers.Big]\nkind = "cloud"\n', "tiers"),
        ('[tiers.x]\nkind = "gpu"\n', "kind"),
        ('[tiers.x]\nbackend = "onnx"\n', "kind"),
    ],
)
def test_a_named_tier_must_have_a_free_name_and_a_kind(tmp_path: Path, table: str, why: str) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(table)
    with pytest.raises(SettingsError, match=why):
        load_settings(config, environ={})


def test_a_provider_tier_is_configured_by_its_section_and_built_as_a_remote_tier(tmp_path: Path) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(
        '[tiers.gpt]\nkind = "provider"\nbase_url = "https://api.openai.com/v1"\nmodel = "gpt-4.1-mini"\n'
        'api_key_env = "OPENAI_API_KEY"\nquality = 0.95\nabilities = ["tools"]\n'
        '[[pricing.prices]]\ntier = "gpt"\nprompt_per_1k = 0.0004\ncached_prompt_per_1k = 0.0001\n'
    )
    settings = load_settings(config, environ={})
    gpt = settings.tier_configs()["gpt"]
    assert gpt.location == "remote"
    tier = build_tiers(settings)["gpt"]
    assert tier.capabilities.model == "gpt-4.1-mini" and tier.capabilities.quality == 0.95
    assert {a.value for a in tier.capabilities.abilities} == {"tools"}
    assert settings.pricing.prices[0].cached_prompt_per_1k == 0.0001


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ('api_key = "sk-in-the-file"', "api_key"),  # never the key itself
        ('api_key_env = "A"\napi_key_file = "/k"', "not both"),
        ('protocol = "azure"', "api_version"),
        ('protocol = "bedrock"', "protocol"),
        ('headers = { Authorization = "Bearer x" }', "set by the tier itself"),
    ],
)
def test_a_provider_tier_refuses_what_it_cannot_use(tmp_path: Path, lines: str, why: str) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(
        f'[tiers.gpt]\nkind = "provider"\nbase_url = "https://x.test/v1"\nmodel = "m"\n{lines}\n'
    )
    with pytest.raises(SettingsError, match=why):
        load_settings(config, environ={})
