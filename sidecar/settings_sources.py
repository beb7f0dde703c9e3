"""Where settings come from: pydantic-settings' own sources, merged in one place.

Highest priority first: the ``SIDECAR_*`` environment (plus the ``SIDECAR_KAFKA_<NAME>``
pass-through no field name can express), a dotenv file (``SIDECAR_ENV_FILE``), a
YAML/TOML/JSON settings file (``SIDECAR_CONFIG_FILE``), then the defaults. Every failure is
one ``InvalidSettings`` line that names the variable, for the CLI's exit 2.
"""

from __future__ import annotations

import difflib
import io
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from dotenv import dotenv_values
from dotenv.parser import parse_stream
from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsError,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)
from pydantic_settings.sources.utils import parse_env_vars

from sidecar.kafka.properties import kafka_properties_from_env
from sidecar.secret_files import SecretFileError
from sidecar.secret_files import resolve as resolve_secret_files
from sidecar.settings import (
    CONFIG_FILE_ENV,
    ENV_FILE_ENV,
    ENV_PREFIX,
    KAFKA_ENV_PREFIX,
    InvalidSettings,
    Settings,
)


class _Environment(EnvSettingsSource):
    """``SIDECAR_*`` variables of one mapping (``os.environ`` at the edge), plus the
    ``SIDECAR_KAFKA_<NAME>`` pass-through that no field name can express."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # The library reads ``os.environ`` here; the CLI hands us that same mapping, tests
        # a dict of their own.
        return parse_env_vars(
            self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )

    def __call__(self) -> dict[str, Any]:
        return _with_kafka_properties(super().__call__(), self.env_vars)


class _DotEnv(DotEnvSettingsSource):
    """The same variables from a dotenv file. Names no setting reads are skipped there
    (``only_existing``), like the environment's; only the environment's get the typo
    warning, as the file may be a FIFO that can be read once."""

    def __init__(self, settings_cls: type[BaseSettings], env_file: Path) -> None:
        super().__init__(settings_cls, env_file=env_file, dotenv_filtering="only_existing")

    def __call__(self) -> dict[str, Any]:
        return _with_kafka_properties(super().__call__(), self.env_vars)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # The named file, whatever it is: the library reads regular files and FIFOs only
        # and skips anything else without a word (``--env-file /dev/stdin`` on a terminal).
        return self._read_env_file(Path(str(self.env_file)))

    def _read_env_file(self, file_path: Path) -> Mapping[str, str | None]:
        """Read once (a FIFO can be read only once), as UTF-8; a line python-dotenv cannot
        parse is an error, not a warning and a setting silently dropped."""
        try:
            text = _read_capped(file_path, ENV_FILE_ENV).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidSettings(f"{ENV_FILE_ENV}: {file_path} is not UTF-8 text") from None
        except OSError as exc:
            raise InvalidSettings(
                f"{ENV_FILE_ENV}: cannot read {file_path}: {exc.strerror}"
            ) from None
        for binding in parse_stream(io.StringIO(text)):
            if binding.error:  # its text is not shown: the line may hold a secret
                raise InvalidSettings(
                    f"{ENV_FILE_ENV}: {file_path} line {binding.original.line}: cannot parse "
                    "it (KEY=value, quotes closed)"
                )
        values = dotenv_values(stream=io.StringIO(text))
        return parse_env_vars(
            values, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


# A settings or dotenv file larger than this is not one (/dev/zero, a log by mistake):
# refused, not read until memory runs out.
MAX_SETTINGS_FILE_BYTES = 4 * 1024 * 1024


def _read_capped(path: Path, variable: str) -> bytes:
    """The file's bytes, read once (a FIFO can be read only once); ``InvalidSettings``
    past ``MAX_SETTINGS_FILE_BYTES``. ``OSError`` as ``open`` and ``read`` raise it."""
    with path.open("rb") as file:
        data = file.read(MAX_SETTINGS_FILE_BYTES + 1)
    _refuse_past_the_cap(len(data), path, variable)
    return data


def _refuse_past_the_cap(size: int, path: Path, variable: str) -> None:
    if size > MAX_SETTINGS_FILE_BYTES:
        raise InvalidSettings(
            f"{variable}: {path} is larger than {MAX_SETTINGS_FILE_BYTES // (1024 * 1024)} MiB: "
            "not a settings file"
        )


def _check_named_file(path: Path, variable: str) -> None:
    """A file that was named must exist and not be a directory (a FIFO or a device is
    fine: ``--env-file <(vault read ...)``, ``/dev/stdin``); ``InvalidSettings`` otherwise,
    also when the path cannot even be looked at (a name too long, a directory not
    searchable)."""
    try:
        if not path.exists():
            raise InvalidSettings(f"{variable}: cannot read {path}: no such file")
        if path.is_dir():
            raise InvalidSettings(f"{variable}: {path} is a directory, not a file")
    except OSError as exc:
        raise InvalidSettings(f"{variable}: cannot read {path}: {exc.strerror}") from None


def _with_kafka_properties(
    data: dict[str, Any], env_vars: Mapping[str, str | None]
) -> dict[str, Any]:
    props = kafka_properties_from_env({k: v for k, v in env_vars.items() if v is not None})
    if props:
        # Merged over the file's ``kafka`` mapping by the library (a deep update).
        data["kafka"] = {**(data.get("kafka") or {}), **props}
    return data


def _settings_file_source(path: Path) -> PydanticBaseSettingsSource:
    """YAML (the default), TOML or JSON by suffix; the library skips a missing file, but
    one that was named must exist."""
    _check_named_file(path, CONFIG_FILE_ENV)
    try:
        if path.is_file():  # the library reads it: its size is checked first
            _refuse_past_the_cap(path.stat().st_size, path, CONFIG_FILE_ENV)
            return _file_source(path, path.suffix)
        # A pipe or a device (``--config <(sops -d settings.yaml)``, /dev/stdin): the
        # library reads regular files only, and skips anything else without a word. Read
        # it once into a private regular file; the source parses it as it is built.
        with tempfile.TemporaryDirectory(prefix="rebalance-sidecar-") as private:
            copy = Path(private) / f"settings{path.suffix}"
            copy.write_bytes(_read_capped(path, CONFIG_FILE_ENV))
            return _file_source(copy, path.suffix)
    except OSError as exc:
        raise InvalidSettings(f"{CONFIG_FILE_ENV}: cannot read {path}: {exc.strerror}") from None
    except (ValueError, yaml.YAMLError) as exc:  # TOMLDecodeError, JSONDecodeError
        raise InvalidSettings(f"{CONFIG_FILE_ENV}: {path} is not valid: {_one_line(exc)}") from None
    except RecursionError:  # the parsers recurse per level of nesting
        raise InvalidSettings(f"{CONFIG_FILE_ENV}: {path} is nested too deeply") from None
    except (AttributeError, TypeError):  # a list or a scalar where settings belong
        raise InvalidSettings(
            f"{CONFIG_FILE_ENV}: {path} must hold a mapping of settings"
        ) from None


def _file_source(path: Path, suffix: str) -> PydanticBaseSettingsSource:
    """The settings in ``path`` (read and parsed now), by ``suffix``: YAML by default."""
    if suffix == ".toml":
        return TomlConfigSettingsSource(Settings, toml_file=path)
    if suffix == ".json":
        return JsonConfigSettingsSource(Settings, json_file=path)
    return YamlConfigSettingsSource(Settings, yaml_file=path)


def load_settings(
    environ: Mapping[str, str], config_file: Path | None = None, env_file: Path | None = None
) -> Settings:
    """Build the settings: environment > dotenv file > settings file > defaults.

    Raise ``InvalidSettings`` with one line naming every offending setting.
    """
    return load_settings_traced(environ, config_file, env_file)[0]


def load_settings_traced(
    environ: Mapping[str, str], config_file: Path | None = None, env_file: Path | None = None
) -> tuple[Settings, list[tuple[str, dict[str, Any]]]]:
    """``load_settings``, and what each source gave, highest priority first, labelled
    ``environment`` or ``file PATH`` (``settings --effective`` shows where values came from)."""
    _text_only(environ)
    upper = {key.upper(): value for key, value in environ.items()}
    if config_file is None and upper.get(CONFIG_FILE_ENV):
        config_file = Path(upper[CONFIG_FILE_ENV])
    if env_file is None and upper.get(ENV_FILE_ENV):
        env_file = Path(upper[ENV_FILE_ENV])
    sources: list[PydanticBaseSettingsSource] = [_Environment(Settings, environ)]
    labels = ["environment"]
    if env_file is not None:
        _check_named_file(env_file, ENV_FILE_ENV)
        sources.append(_DotEnv(Settings, env_file))
        labels.append(f"file {env_file}")
    if config_file is not None:
        sources.append(_settings_file_source(config_file))
        labels.append(f"file {config_file}")
    try:
        # ``_build_sources``: BaseSettings' documented way to hand it ready sources; mypy
        # sees only the fields in the signature. Each source read its file when built.
        settings = Settings(_build_sources=(tuple(sources), {}))  # type: ignore[call-arg]
        return settings, [(label, source()) for label, source in zip(labels, sources, strict=True)]
    except ValidationError as exc:
        raise InvalidSettings(_describe(exc)) from None
    except SettingsError as exc:
        # The library's message names the field: "error parsing value for field "kafka"".
        field = re.search(r'field "(\w+)"', str(exc))
        where = f"{ENV_PREFIX}{field.group(1).upper()}" if field else "settings"
        raise InvalidSettings(f"invalid setting {where}: {_one_line(exc)}") from None


def _text_only(environ: Mapping[str, str]) -> None:
    """A ``SIDECAR_*`` variable whose name or value is not UTF-8 (Python keeps such bytes
    as lone surrogates) would reach librdkafka's C code and crash the process: refuse it."""
    for key, value in environ.items():
        if not key.upper().startswith(ENV_PREFIX):
            continue
        if key.upper() in (CONFIG_FILE_ENV, ENV_FILE_ENV):  # paths Python opens as bytes
            value = ""
        for text, what in ((key, "name"), (value, "value")):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                shown = key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                raise InvalidSettings(
                    f"invalid setting {shown}: its {what} is not UTF-8 text"
                ) from None


def with_secret_files(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with each ``SIDECAR_<X>_FILE`` read into ``SIDECAR_<X>``."""
    try:
        return resolve_secret_files(environ)
    except SecretFileError as exc:
        raise InvalidSettings(str(exc)) from None


def known_variables() -> tuple[str, ...]:
    """Every ``SIDECAR_*`` name the sidecar reads (the Kafka pass-through as its prefix)."""
    return (
        *(f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields if name != "kafka"),
        CONFIG_FILE_ENV,
        ENV_FILE_ENV,
    )


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One line per ``SIDECAR_*`` variable nothing reads: a typo silently means a default."""
    known = known_variables()
    lines = []
    for key in sorted(environ):
        name = key.upper()
        if not name.startswith(ENV_PREFIX) or name in known or name.startswith(KAFKA_ENV_PREFIX):
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"unknown variable {key} is ignored{hint}")
    return lines


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if error["type"] == "extra_forbidden" and len(loc) == 1:
            close = difflib.get_close_matches(loc[0], list(Settings.model_fields), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            lines.append(f"unknown setting {loc[0]!r} in the settings file{hint}")
            continue
        message = _one_line(ValueError(str(error["msg"]).removeprefix("Value error, ")))
        if not loc:  # settings that do not go together: the message names them
            lines.append(f"invalid settings: {message}")
            continue
        name = f"{ENV_PREFIX}{loc[0].upper()}"
        if loc[0] == "kafka" and len(loc) > 1:
            name = f"kafka property {loc[1]}"
        where = f"{name}{'[' + ']['.join(loc[1:]) + ']' if len(loc) > 1 else ''}"
        if error["type"] == "extra_forbidden":  # a key inside an entry: a webhook's, say
            message = f"unknown key {loc[-1]!r}"
        lines.append(f"invalid setting {where}: {message}")
    return "; ".join(lines)
