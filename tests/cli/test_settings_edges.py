"""Settings that once got past validation and failed later: a segfault in librdkafka's C
code, a 500 on every authenticated request, a courier crashing forever, a traceback at
shutdown, a webhook silently replaced. Each is now one line at start-up, exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.settings import InvalidSettings
from sidecar.settings_sources import MAX_SETTINGS_FILE_BYTES, load_settings
from tests.support.sidecars import REPO

GOOD = {"SIDECAR_BOOTSTRAP_SERVERS": "127.0.0.1:9", "SIDECAR_GROUP_ID": "g", "SIDECAR_TOPICS": "t"}
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NOT_UTF8 = b"g\xff".decode("utf-8", "surrogateescape")  # how Python holds such bytes


def refused(env: dict[str, str], **files: Path) -> str:
    with pytest.raises(InvalidSettings) as caught:
        load_settings({**GOOD, **env}, **files)
    message = str(caught.value)
    assert "\n" not in message
    return message


def webhook(url: str, **extra: str) -> dict[str, str]:
    return {"url": url, "secret": SECRET, **extra}


@pytest.mark.parametrize(
    ("env", "said"),
    [
        # bytes that are not UTF-8: librdkafka segfaulted or asserted (Consumer_init)
        ({"SIDECAR_GROUP_ID": NOT_UTF8}, "SIDECAR_GROUP_ID: its value is not UTF-8 text"),
        ({"SIDECAR_KAFKA_CLIENT_ID": NOT_UTF8}, "SIDECAR_KAFKA_CLIENT_ID: its value is not"),
        ({"SIDECAR_KAFKA_CLIENT" + NOT_UTF8: "1"}, "SIDECAR_KAFKA_CLIENTg\\xff: its name is"),
        # a token no HTTP header can carry: every authenticated request answered 500
        ({"SIDECAR_API_TOKEN": "s3" + NOT_UTF8}, "SIDECAR_API_TOKEN"),
        ({"SIDECAR_API_TOKEN": "pässword"}, "SIDECAR_API_TOKEN: may hold only printable ASCII"),
        ({"SIDECAR_DRAIN_TOKEN": "tab\tbed"}, "SIDECAR_DRAIN_TOKEN: may hold only printable"),
        ({"SIDECAR_DRAIN_TOKEN": "trailing "}, "without leading or trailing spaces"),
        ({"SIDECAR_DRAIN_TOKEN": " "}, "SIDECAR_DRAIN_TOKEN: is blank"),
        # durations the time APIs refuse: a traceback at shutdown, the leave not awaited
        ({"SIDECAR_SHUTDOWN_TIMEOUT_MS": "1" + "0" * 20}, "SIDECAR_SHUTDOWN_TIMEOUT_MS"),
        ({"SIDECAR_DRAIN_TIMEOUT_MS": "1" + "0" * 12}, "SIDECAR_DRAIN_TIMEOUT_MS"),
        ({"SIDECAR_DRAINED_RESTART_AFTER_MS": "-1"}, "SIDECAR_DRAINED_RESTART_AFTER_MS"),
        # SQLite refused the number: pruning died, nothing logged
        ({"SIDECAR_JOURNAL_RETENTION_EVENTS": "1" + "0" * 23}, "SIDECAR_JOURNAL_RETENTION"),
        ({"SIDECAR_WEBHOOKS": "[" * 5000 + "]" * 5000}, "SIDECAR_WEBHOOKS: not valid JSON"),
        # a port in other digits: Python's int() read 9092, librdkafka dialled port 0 for ever
        ({"SIDECAR_BOOTSTRAP_SERVERS": "kafka:٩٠٩٢"}, "SIDECAR_BOOTSTRAP_SERVERS: 'kafka:٩٠٩٢' is"),
        # Path("") is the working directory
        ({"SIDECAR_DATA_DIR": ""}, "SIDECAR_DATA_DIR: is empty"),
        # a name the broker refuses ("Invalid topic"): every event failed, retried every
        # 2 s with a warning, the journal held for the whole retention
        ({"SIDECAR_EVENTS_TOPIC": "fleet events"}, "SIDECAR_EVENTS_TOPIC: 'fleet events' is not"),
        ({"SIDECAR_EVENTS_TOPIC": "flëet"}, "SIDECAR_EVENTS_TOPIC: 'flëet' is not a valid topic"),
        ({"SIDECAR_EVENTS_TOPIC": ".."}, "SIDECAR_EVENTS_TOPIC: '..' is not a valid topic name"),
        ({"SIDECAR_EVENTS_TOPIC": "e" * 250}, "SIDECAR_EVENTS_TOPIC: 'eeee"),
        ({"SIDECAR_TOPICS": "orders,."}, "SIDECAR_TOPICS: '.' is not a valid topic name"),
        # patterns Python's regex parser fails on other than with re.error: a traceback
        ({"SIDECAR_TOPICS": "^orders-[0-9]{99999999999}"}, "SIDECAR_TOPICS: '^orders-[0-9]{9"),
        ({"SIDECAR_TOPICS": "^" + "(" * 2000 + ")" * 2000}, "is not a valid regex: nested too"),
        # the second replaced the first without a word
        (
            {"SIDECAR_WEBHOOKS": json.dumps([webhook("http://a/", id="x"), webhook("http://b/", id="x")])},  # noqa: E501
            "SIDECAR_WEBHOOKS: two webhooks share the id 'x'",
        ),
        (
            {"SIDECAR_WEBHOOKS": json.dumps([webhook("http://a/"), webhook("http://a/")])},
            "two webhooks share the URL 'http://a/' and no id",
        ),
    ],
)  # fmt: skip
def test_settings_that_failed_later_are_refused_at_start(env: dict[str, str], said: str) -> None:
    assert said in refused(env)


def test_an_events_topic_kafka_accepts_is_taken_and_an_empty_one_is_off() -> None:
    assert load_settings({**GOOD, "SIDECAR_EVENTS_TOPIC": "rebalance-events.v1_x"}).events_topic
    assert not load_settings({**GOOD, "SIDECAR_EVENTS_TOPIC": ""}).events_topic


def test_tokens_with_inner_spaces_still_work() -> None:
    # A header carries them (HTTPBearer splits at the first space only): keep them.
    settings = load_settings(
        {**GOOD, "SIDECAR_API_TOKEN": "two words", "SIDECAR_DRAIN_TOKEN": "a b"}
    )
    assert settings.api_token is not None and settings.api_token.get_secret_value() == "two words"


def test_a_json_settings_file_may_not_spell_a_lone_surrogate(tmp_path: Path) -> None:
    config = tmp_path / "settings.json"
    config.write_text('{"group_id": "\\ud800"}')  # valid JSON, not text
    env = {k: v for k, v in GOOD.items() if k != "SIDECAR_GROUP_ID"}
    with pytest.raises(InvalidSettings, match="group_id holds characters that are not text"):
        load_settings(env, config_file=config)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"SIDECAR_GROUP_ID=\xff\xfe\n", "is not UTF-8 text"),  # a traceback before
        # python-dotenv warned and dropped the line; the sidecar started without it
        (b'SIDECAR_GROUP_ID=g\nSIDECAR_TOPICS="unterminated\n', "line 2: cannot parse it"),
    ],
)
def test_a_dotenv_file_that_cannot_be_read_whole_is_refused(
    tmp_path: Path, content: bytes, said: str
) -> None:
    env_file = tmp_path / "sidecar.env"
    env_file.write_bytes(content)
    message = refused({}, env_file=env_file)
    assert said in message and "unterminated" not in message  # a line may hold a secret


def test_a_dotenv_file_that_is_a_directory_is_named(tmp_path: Path) -> None:
    # It was read as empty: "missing required setting(s)", never naming the file.
    assert "is a directory" in refused({}, env_file=tmp_path)


def test_a_settings_file_that_is_a_directory_is_named(tmp_path: Path) -> None:
    assert "is a directory" in refused({}, config_file=tmp_path)  # was: "no such file"


def test_the_good_dotenv_file_still_reads(tmp_path: Path) -> None:
    env_file = tmp_path / "sidecar.env"
    env_file.write_text("# comment\nSIDECAR_GROUP_ID='from the file'\nexport SIDECAR_TOPICS=a,b\n")
    env = {k: v for k, v in GOOD.items() if k not in ("SIDECAR_GROUP_ID", "SIDECAR_TOPICS")}
    settings = load_settings(env, env_file=env_file)
    assert (settings.group_id, settings.topics) == ("from the file", ("a", "b"))


def test_bytes_that_are_not_utf8_exit_2_not_a_crash() -> None:
    """The process as users run it: it segfaulted (exit 139) or aborted (134)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env = {**base, **GOOD, "SIDECAR_API_PORT": "0", "SIDECAR_ADMIN_PORT": "-1"}
    env_bytes = {k.encode(): v.encode() for k, v in env.items()}
    for key, value in ((b"SIDECAR_KAFKA_CLIENT\xff", b"1"), (b"SIDECAR_GROUP_ID", b"g\xff")):
        done = subprocess.run(
            [sys.executable, "-m", "sidecar", "run"],
            env={**env_bytes, key: value},
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("rebalance-sidecar: invalid setting SIDECAR_")
        assert "not UTF-8 text" in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    return subprocess.run(
        [sys.executable, "-m", "sidecar", "run", *args],
        env={**base, "SIDECAR_API_PORT": "0", "SIDECAR_ADMIN_PORT": "-1", **env},
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("env", "said"),
    [
        # librdkafka aborted the process (exit 134, one C assertion line)
        ({**GOOD, "SIDECAR_GROUP_ID": " "}, "SIDECAR_GROUP_ID: is blank"),
        ({**GOOD, "SIDECAR_GROUP_ID": "\t"}, "SIDECAR_GROUP_ID: is blank"),
        # the member thread died at subscribe; the process served on, out of the group
        ({**GOOD, "SIDECAR_ASSIGNMENT_STRATEGY": " "}, "SIDECAR_ASSIGNMENT_STRATEGY: is blank"),
    ],
)
def test_a_blank_group_or_strategy_exits_2_with_one_line(env: dict[str, str], said: str) -> None:
    done = _run(env)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        # RecursionError, a traceback and exit 1
        ("deep.yaml", "group_id: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested too deeply"),
        ("deep.json", '{"group_id": ' + "[" * 20_000 + "]" * 20_000 + "}", "nested too deeply"),
        # ValueError: embedded null byte, a traceback from opening the journal
        ("nul.json", '{"data_dir": "/tmp/x\\u0000y"}', "data_dir holds characters that are not"),
        # librdkafka cut the name at the NUL and subscribed to another pattern
        ("nul.yaml", 'topics: "^a\\0b"\n', "topics holds characters that are not text"),
    ],
)
def test_a_settings_file_too_deep_or_with_a_nul_exits_2_with_one_line(
    tmp_path: Path, name: str, content: str, said: str
) -> None:
    config = tmp_path / name
    config.write_text(content)
    done = _run({k: v for k, v in GOOD.items() if k != "SIDECAR_TOPICS"}, "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_dotenv_file_with_a_nul_is_refused(tmp_path: Path) -> None:
    env_file = tmp_path / "sidecar.env"
    env_file.write_bytes(b"SIDECAR_DATA_DIR=/tmp/x\x00y\n")
    assert "data_dir holds characters that are not text" in refused({}, env_file=env_file)


def test_a_settings_file_that_is_not_a_regular_file_is_read(tmp_path: Path) -> None:
    # /dev/null was "cannot read /dev/null: no such file"
    settings = load_settings(GOOD, config_file=Path("/dev/null"))
    assert settings.group_id == "g"
    # A pipe (``--config <(sops -d settings.yaml)``): the library skipped it without a
    # word, and the sidecar started without its settings.
    read, write = os.pipe()
    os.write(write, b"group_id: from-the-pipe\ntopics: [a, b]\n")
    os.close(write)
    try:
        env = {k: v for k, v in GOOD.items() if k not in ("SIDECAR_GROUP_ID", "SIDECAR_TOPICS")}
        piped = load_settings(env, config_file=Path(f"/dev/fd/{read}"))
    finally:
        os.close(read)
    assert (piped.group_id, piped.topics) == ("from-the-pipe", ("a", "b"))


@pytest.mark.parametrize("pattern", ["^(?:orders)", "^(?=x)orders", "^(?P<n>orders)"])
def test_a_pattern_librdkafka_refuses_exits_2_with_one_line(pattern: str) -> None:
    """Python's ``re`` takes these, librdkafka's regex engine does not: the member thread
    died at subscribe with a traceback while the process served on, out of the group."""
    done = _run({**GOOD, "SIDECAR_TOPICS": f"orders,{pattern}"})
    assert done.returncode == 2, done.stderr
    assert f"librdkafka's regex engine refuses {pattern!r}" in done.stderr
    assert "Traceback" not in done.stderr and "orders'" not in done.stderr.replace(pattern, "")
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("value", "said"),
    [
        # a budget of a few pages would cut every delivered event at every prune
        ("4096", "SIDECAR_JOURNAL_MAX_BYTES: 4096 bytes is below 1 MiB (1048576)"),
        # the unit of the emptyDir's sizeLimit next to it: this one is bytes
        ("128Mi", "SIDECAR_JOURNAL_MAX_BYTES: '128Mi' is not a whole number of bytes"),
        ("-1", "SIDECAR_JOURNAL_MAX_BYTES: '-1' is not a whole number of bytes"),
        ("1.5e8", "SIDECAR_JOURNAL_MAX_BYTES: '1.5e8' is not a whole number of bytes"),
    ],
)
def test_a_journal_size_budget_that_is_not_bytes_exits_2_with_one_line(
    value: str, said: str
) -> None:
    done = _run({**GOOD, "SIDECAR_JOURNAL_MAX_BYTES": value})
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_journal_size_budget_in_bytes_or_0_is_taken() -> None:
    assert load_settings(GOOD).journal_max_bytes == 0  # no limit
    assert load_settings({**GOOD, "SIDECAR_JOURNAL_MAX_BYTES": "0"}).journal_max_bytes == 0
    taken = load_settings({**GOOD, "SIDECAR_JOURNAL_MAX_BYTES": "134217728"})
    assert taken.journal_max_bytes == 128 * 1024 * 1024


def test_a_posix_class_in_a_pattern_warns_nothing() -> None:
    # Python warned "Possible nested set" on stderr; librdkafka takes the pattern.
    # (a blank group id ends the start right after the settings are read)
    done = _run({**GOOD, "SIDECAR_TOPICS": "^[[:alpha:]]+", "SIDECAR_GROUP_ID": " "})
    assert done.returncode == 2
    assert "FutureWarning" not in done.stderr and "nested set" not in done.stderr


@pytest.mark.parametrize("kind", ["env_file", "config_file"])
def test_a_settings_file_past_4_mib_is_refused_not_read_whole(tmp_path: Path, kind: str) -> None:
    """Either file is read at most 4 MiB deep: a file without end (``/dev/zero`` as the
    settings file) was read until memory ran out. Regular files are capped too."""
    big = tmp_path / ("big.env" if kind == "env_file" else "big.yaml")
    big.write_bytes(b"# " + b"x" * (MAX_SETTINGS_FILE_BYTES + 10) + b"\n")
    assert f"{big} is larger than 4 MiB: not a settings file" in refused({}, **{kind: big})
    # At the limit it is read (a comment only: nothing set).
    big.write_bytes(b"#" * (MAX_SETTINGS_FILE_BYTES - 1) + b"\n")
    assert load_settings(GOOD, **{kind: big}).group_id == GOOD["SIDECAR_GROUP_ID"]


@pytest.mark.parametrize(
    ("given", "host"),
    [
        ("[::1]", "::1"),  # as IPv6 addresses are written in URLs: was refused, then unbindable
        ("::1", "::1"),
        ("127.1", "127.1"),  # IPv4 forms the resolver takes: were "not loopback"
        ("0x7f.0.0.1", "0x7f.0.0.1"),
        ("2130706433", "2130706433"),
        ("localhost", "localhost"),
    ],
)
def test_every_way_of_writing_loopback_is_loopback(given: str, host: str) -> None:
    settings = load_settings({**GOOD, "SIDECAR_API_HOST": given})
    assert settings.api_host == host
    assert settings.api_token is None


@pytest.mark.parametrize("given", ["10.1", "127.0.0.1 evil", "[::]", "[10.0.0.1]", "0.0.0.0"])
def test_what_is_not_loopback_still_needs_a_token(given: str) -> None:
    assert "is not loopback: set SIDECAR_API_TOKEN" in refused({"SIDECAR_API_HOST": given})


def test_a_bracketed_admin_address_is_the_address() -> None:
    settings = load_settings({**GOOD, "SIDECAR_ADMIN_HOST": "[::]"})
    assert settings.admin_host == "::"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        # Named neither the variable set nor the one to use ("use the dedicated SIDECAR_
        # settings"), and the settings that do not go together as "invalid setting settings"
        # with the fields' internal names.
        (
            {"SIDECAR_KAFKA_GROUP_ID": "x"},
            "group.id (SIDECAR_KAFKA_GROUP_ID) is the sidecar's own: set SIDECAR_GROUP_ID",
        ),
        (
            {"SIDECAR_KAFKA_PARTITION_ASSIGNMENT_STRATEGY": "range"},
            "(SIDECAR_KAFKA_PARTITION_ASSIGNMENT_STRATEGY) is the sidecar's own: "
            "set SIDECAR_ASSIGNMENT_STRATEGY",
        ),
        (
            {"SIDECAR_REVOKE_TIMEOUT_MS": "299000"},
            "invalid settings: SIDECAR_REVOKE_TIMEOUT_MS=299000 leaves no headroom under "
            "SIDECAR_KAFKA_MAX_POLL_INTERVAL_MS=300000",
        ),
        (
            {"SIDECAR_GROUP_PROTOCOL": "consumer", "SIDECAR_ASSIGNMENT_STRATEGY": "range"},
            "invalid settings: SIDECAR_ASSIGNMENT_STRATEGY applies to "
            "SIDECAR_GROUP_PROTOCOL=classic only",
        ),
        ({"SIDECAR_API_HOST": "0.0.0.0"}, "invalid settings: SIDECAR_API_HOST=0.0.0.0 is not"),
    ],
)
def test_a_refusal_names_the_variables_to_change(env: dict[str, str], says: str) -> None:
    assert says in refused(env)
