"""Settings from the environment and files; names are contract (DESIGN.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.settings import InvalidSettings, kafka_properties_from_env, load_settings


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
