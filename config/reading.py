"""Reading the settings' raw values: a TOML file, then the ``TICDC_SINK_*`` variables over it.

What comes out is each given setting's raw value by its name (text from the environment, TOML's
own types from a file), a secret read from its file in its place, for the model to validate. A
name that is no setting is refused, in a file as in the environment, naming the closest one.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from config.errors import ConfigError
from config.names import ENV_PREFIX, FILE_SUFFIX, Names, closest, env_name, unknown

# TICDC_SINK_* variables that are no settings, each read by the one piece of code that needs it.
NOT_SETTINGS = {
    "TICDC_SINK_NATIVE": "0 turns the native decoders off",
    "TICDC_SINK_STATE_DIR": "where `ticdc-sink services` keeps the local services' files",
    "TICDC_SINK_SHARED": "where the tests find the shared conformance messages",
}
# A secret's file in a TOML file: `redis_password_file`, or `password_file` in [redis].
_FILE_KEY = FILE_SUFFIX.lower()


def read_values(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str], names: Names
) -> dict[str, Any]:
    """Each given setting's raw value by name: the TOML file's at ``path``, the environment's
    over them, and a secret given as a file read from it."""
    values = read_toml(Path(path), names) if path else {}
    values.update(environ_values(environ, names))
    return with_secret_files(values, names)


def read_toml(path: Path, names: Names) -> dict[str, Any]:
    """The file's settings by name: flat keys, and the keys of group tables (``[kafka]``)."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"--config {path}: no such file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML: {exc}") from exc
    return toml_values(data, names, path)


def toml_values(data: Mapping[str, Any], names: Names, path: Path) -> dict[str, Any]:
    """The settings by name of a TOML document read from ``path``: flat, or in a ``[ticdc-sink]``
    table; a setting in its group's table by its key there."""
    section = data.get("ticdc-sink", data)
    if not isinstance(section, dict):
        raise ConfigError(f"--config {path}: [ticdc-sink] must be a table")
    values: dict[str, Any] = {}
    for raw_key, value in section.items():
        key = str(raw_key).replace("-", "_")
        if key in names.groups and isinstance(value, dict):
            for raw_inner, item in value.items():
                name = name_in_group(names, key, str(raw_inner).replace("-", "_"))
                _put(values, name, item, path)
        else:
            _put(values, flat_name(names, key), value, path)
    return values


def flat_name(names: Names, key: str) -> str:
    """The setting name of a flat file's ``key`` (``<name>_file`` for a secret's file)."""
    base = key.removesuffix(_FILE_KEY)
    if key in names.by_name or (base != key and base in names.secrets):
        return key
    raise ConfigError(f"invalid settings: {unknown(key, names.by_name)}")


def name_in_group(names: Names, group: str, key: str) -> str:
    """The setting name of ``key`` in group table ``[group]`` (its field name or its own
    name; ``<key>_file`` for a secret's file)."""
    fields = names.groups[group].model_fields
    base = key.removesuffix(_FILE_KEY)
    for field_name, field in fields.items():
        name = field.alias or field_name
        if key in {field_name, name}:
            return name
        if base != key and base in {field_name, name} and name in names.secrets:
            return name + _FILE_KEY
    raise ConfigError(f"invalid settings: {unknown(key, fields, f' in [{group}]')}")


def _put(values: dict[str, Any], name: str, value: Any, path: Path) -> None:
    if name in values:
        raise ConfigError(f"--config {path}: {name} is set twice (flat and in its group's table)")
    values[name] = value


def environ_values(environ: Mapping[str, str], names: Names) -> dict[str, str]:
    """The settings the ``TICDC_SINK_*`` variables give, by name (``<name>_file`` for a secret's
    file); a variable that is none of them nor in :data:`NOT_SETTINGS` is refused."""
    files = {env_name(name) + FILE_SUFFIX: name + _FILE_KEY for name in names.secrets}
    values: dict[str, str] = {}
    refused: list[str] = []
    for variable, value in environ.items():
        if not variable.startswith(ENV_PREFIX) or variable in NOT_SETTINGS:
            continue
        if variable in names.by_variable:
            values[names.by_variable[variable].name] = value
        elif variable in files:
            values[files[variable]] = value
        else:
            refused.append(variable)
    if refused:
        lines = (unknown_variable(variable, names) for variable in sorted(refused))
        raise ConfigError("invalid settings: " + "; ".join(lines))
    return values


def unknown_variable(variable: str, names: Names) -> str:
    """The complaint about a variable that is no setting, without its value (a misspelt
    password's variable still holds the password); the names are compared without the prefix
    every variable shares."""
    known = [*names.by_name, *(name + _FILE_KEY for name in names.secrets)]
    near = closest(variable.removeprefix(ENV_PREFIX).lower(), known)
    hint = (
        f"did you mean {env_name(near)}?"
        if near
        else "`ticdc-sink config describe` lists every setting"
    )
    return f"unknown variable {variable}; {hint}"


def with_secret_files(values: Mapping[str, Any], names: Names) -> dict[str, Any]:
    """``values`` with each secret given as a file (``<name>_file``) read from it; a secret
    given both ways is refused."""
    result = dict(values)
    for name in names.secrets:
        file_key = name + _FILE_KEY
        if file_key not in result:
            continue
        secret_file = str(result.pop(file_key))
        if name in result:
            raise ConfigError(f"{env_name(name)} and {env_name(file_key)} are both set: keep one")
        result[name] = read_secret_file(env_name(file_key), secret_file)
    return result


def read_secret_file(variable: str, path: str) -> str:
    """A secret from a file (a container secret), without its trailing newline."""
    try:
        return Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{variable}={path}: cannot read it ({exc.strerror})") from None
