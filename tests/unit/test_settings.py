"""Settings from the environment, a dotenv file and a settings file; names are contract
(docs/settings.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.kafka.properties import (
    kafka_properties_from_env,
    kafka_property_name,
    kafka_property_variable,
)
from sidecar.settings import (
    InvalidSettings,
    Settings,
)
from sidecar.settings_sources import load_settings, unknown_variables


def test_kafka_passthrough_names() -> None:
    assert kafka_properties_from_env(
        {
            "SIDECAR_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "SIDECAR_KAFKA_SASL_MECHANISM": "PLAIN",
            "SIDECAR_KAFKA_SSL_CA_LOCATION": "/ca.pem",
            "SIDECAR_KAFKA_PLUGIN__LIBRARY__PATHS": "x",  # __ keeps an underscore
            "SIDECAR_TOPICS": "ignored",
        }
    ) == {
        "session.timeout.ms": "6000",
        "sasl.mechanism": "PLAIN",
        "ssl.ca.location": "/ca.pem",
        "plugin_library_paths": "x",
    }


def test_topics_regex_and_defaults() -> None:
    settings = load_settings({"SIDECAR_TOPICS": "orders, ^audit-.*", "SIDECAR_GROUP_ID": "g"})
    assert settings.topics == ("orders", "^audit-.*")
    # a comma inside a regex's {m,n} is the regex's, not a separator
    counted = load_settings({"SIDECAR_TOPICS": "^o-[0-9]{1,3}$,a,^b{2,}", "SIDECAR_GROUP_ID": "g"})
    assert counted.topics == ("^o-[0-9]{1,3}$", "a", "^b{2,}")
    assert settings.api_host == "127.0.0.1" and settings.api_port == 8080
    assert settings.protocol_name == "eager"
    assert not settings.cooperative


@pytest.mark.parametrize(
    ("env", "cooperative"),
    [
        ({"SIDECAR_ASSIGNMENT_STRATEGY": "cooperative-sticky"}, True),
        ({"SIDECAR_ASSIGNMENT_STRATEGY": "roundrobin"}, False),
        ({"SIDECAR_GROUP_PROTOCOL": "consumer"}, True),
    ],
)
def test_protocol_is_derived_from_the_settings(env: dict[str, str], cooperative: bool) -> None:
    assert load_settings(env).cooperative is cooperative


def test_file_then_environment(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(
        'group_id = "file"\ntopics = ["a", "b"]\n[kafka]\n"session.timeout.ms" = 7000\n'
    )
    settings = load_settings({"SIDECAR_GROUP_ID": "env"}, toml)
    assert settings.group_id == "env"
    assert settings.topics == ("a", "b")
    assert settings.kafka == {"session.timeout.ms": "7000"}


def test_webhooks_from_json_keep_secrets_secret() -> None:
    settings = load_settings(
        {
            "SIDECAR_WEBHOOKS": (
                '[{"url": "http://127.0.0.1:9000/h", '
                '"secret": "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", '
                '"mode": "async", "events": ["kafka.partitions.assigned"]}]'
            )
        }
    )
    (hook,) = settings.webhooks
    assert hook.mode == "async" and hook.events == ("kafka.partitions.assigned",)
    assert "whsec_" not in repr(settings)


def test_errors_name_every_setting() -> None:
    with pytest.raises(InvalidSettings) as caught:
        load_settings({"SIDECAR_API_PORT": "x", "SIDECAR_REVOKE_TIMEOUT_MS": "-1"})
    assert "SIDECAR_API_PORT" in str(caught.value)
    assert "SIDECAR_REVOKE_TIMEOUT_MS" in str(caught.value)


def test_dotenv_sits_between_the_environment_and_the_settings_file(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        "group_id: from-file\ntopics: [a]\napi_port: 9001\n"
        "kafka:\n  session.timeout.ms: 7000\n  fetch.wait.max.ms: 100\n"
    )
    dotenv = tmp_path / "sidecar.env"
    dotenv.write_text(
        "SIDECAR_GROUP_ID=from-dotenv\nSIDECAR_API_PORT=9002\n"
        "SIDECAR_KAFKA_SESSION_TIMEOUT_MS=8000\nUNRELATED=1\n"
    )
    environ = {"SIDECAR_ENV_FILE": str(dotenv), "SIDECAR_API_PORT": "9003"}
    settings = load_settings(environ, config)
    assert settings.group_id == "from-dotenv"
    assert settings.api_port == 9003
    assert settings.topics == ("a",)
    # The Kafka properties merge property by property across the three levels.
    assert settings.kafka == {"session.timeout.ms": "8000", "fetch.wait.max.ms": "100"}


def test_a_named_dotenv_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(InvalidSettings, match="SIDECAR_ENV_FILE: cannot read"):
        load_settings({"SIDECAR_ENV_FILE": str(tmp_path / "missing.env")})


def test_file_values_reach_librdkafka_as_its_text(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text("kafka:\n  enable.partition.eof: true\n  fetch.wait.max.ms: 100\n")
    assert load_settings({}, config).kafka == {
        "enable.partition.eof": "true",
        "fetch.wait.max.ms": "100",
    }


def test_an_unknown_key_in_the_file_names_the_closest_setting(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.toml"
    config.write_text('groupid = "g"\n')
    with pytest.raises(InvalidSettings, match=r"'groupid'.*did you mean group_id\?"):
        load_settings({}, config)


def test_a_file_of_the_wrong_shape_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text("topics: [\n")
    with pytest.raises(InvalidSettings) as caught:
        load_settings({}, config)
    assert str(caught.value).startswith("SIDECAR_CONFIG_FILE: ")
    assert "\n" not in str(caught.value)


def test_settings_built_in_code_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Settings(...)`` is a value object (the demo's, the tests'): no ambient SIDECAR_*."""
    monkeypatch.setenv("SIDECAR_GROUP_ID", "ambient")
    monkeypatch.setenv("SIDECAR_KAFKA_SESSION_TIMEOUT_MS", "6000")
    settings = Settings(group_id="given")
    assert settings.group_id == "given"
    assert settings.kafka == {}


def test_unknown_variables_name_the_closest_setting() -> None:
    assert unknown_variables(
        {
            "SIDECAR_GROUPID": "g",
            "SIDECAR_TOPICS": "t",
            "SIDECAR_KAFKA_BOGUS": "1",  # librdkafka judges these (cli.check_kafka_config)
            "SIDECAR_CONFIG_FILE": "x",
            "PATH": "/bin",
        }
    ) == ["unknown variable SIDECAR_GROUPID is ignored (did you mean SIDECAR_GROUP_ID?)"]


def test_kafka_property_variable_is_the_inverse_of_the_name() -> None:
    for variable in ("SIDECAR_KAFKA_SESSION_TIMEOUT_MS", "SIDECAR_KAFKA_PLUGIN__LIBRARY__PATHS"):
        assert kafka_property_variable(kafka_property_name(variable)) == variable
