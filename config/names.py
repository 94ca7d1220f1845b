"""The registry of names: each setting's name, its variable, its attribute path and its group.

A setting's name is its field's alias: its variable is ``TICDC_SINK_`` + the name in capitals
(``kafka`` -> ``TICDC_SINK_KAFKA``), a flat TOML file's key is the name, and in its group's table
(``[kafka]``) its key is the field's own name (``bootstrap``). The registry is read off the
settings model, so declaring a field registers its setting.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from config.errors import ConfigError

ENV_PREFIX = "TICDC_SINK_"
# A secret setting can also come from a file named by its variable + this (container secrets).
FILE_SUFFIX = "_FILE"


def env_name(name: str) -> str:
    """The environment variable that sets the setting ``name``."""
    return ENV_PREFIX + name.upper()


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known word ``word`` most likely is a typo of, if one is close."""
    matches = difflib.get_close_matches(word, list(known), n=1)
    return matches[0] if matches else None


def unknown(name: str, known: Iterable[str], where: str = "") -> str:
    """The complaint about ``name``, which is none of the ``known`` settings (``where``: of a
    group's table): the one it most likely is a typo of, else the known ones."""
    known = list(known)
    near = closest(name, known)
    return f"unknown setting {name!r}{where}; " + (
        f"did you mean {near!r}?" if near else f"known: {', '.join(known)}"
    )


@dataclass(frozen=True)
class SettingDoc:
    """One setting as the README's table and ``ticdc-sink config describe`` show it."""

    # Its own name: the variable without TICDC_SINK_, a flat TOML file's key.
    name: str
    # Its attribute path from Settings: ("kafka", "bootstrap"), or ("group",).
    path: tuple[str, ...]
    description: str
    # A password: masked wherever it shows, and it may come from a file.
    secret: bool

    @property
    def variable(self) -> str:
        return env_name(self.name)

    @property
    def group(self) -> str | None:
        return self.path[0] if len(self.path) > 1 else None


class Names:
    """Every setting of a settings model: its fields of a model type are groups (``kafka``), the
    others settings of their own (``group``)."""

    def __init__(self, model: type[BaseModel]) -> None:
        # The groups, by their attribute (and TOML table) name.
        self.groups: dict[str, type[BaseModel]] = {
            name: field.annotation
            for name, field in model.model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        }
        # Every setting, in the order of the groups.
        self.settings: tuple[SettingDoc, ...] = tuple(self._docs(model))
        self.by_name: dict[str, SettingDoc] = {doc.name: doc for doc in self.settings}
        self.by_variable: dict[str, SettingDoc] = {doc.variable: doc for doc in self.settings}
        self.secrets: tuple[str, ...] = tuple(doc.name for doc in self.settings if doc.secret)
        self._model = model

    def _docs(self, model: type[BaseModel]) -> Iterator[SettingDoc]:
        for name, field in model.model_fields.items():
            group = self.groups.get(name)
            if group is None:
                yield _doc(name, (name,), field)
                continue
            for key, inner in group.model_fields.items():
                yield _doc(inner.alias or key, (name, key), inner)

    def setting(self, name: str) -> SettingDoc:
        """The setting called ``name``; a ConfigError names the closest known one."""
        try:
            return self.by_name[name]
        except KeyError:
            raise ConfigError(f"invalid settings: {unknown(name, self.by_name)}") from None

    def field(self, name: str) -> FieldInfo:
        """The field that declares the setting ``name``."""
        path = self.setting(name).path
        model = self._model if len(path) == 1 else self.groups[path[0]]
        return model.model_fields[path[-1]]

    def default_of(self, name: str) -> Any:
        """The default of the setting ``name``, as its field declares it."""
        return self.field(name).get_default(call_default_factory=True)

    def value_of(self, settings: BaseModel, name: str) -> Any:
        """The value of the setting ``name`` (``kafka_ssl_ca``: ``settings.kafka.ssl_ca``)."""
        value: Any = settings
        for part in self.setting(name).path:
            value = getattr(value, part)
        return value

    def place(self, nested: dict[str, Any], name: str, value: Any) -> None:
        """Put setting ``name``'s raw value where the model's validation reads it."""
        path = self.setting(name).path
        if len(path) == 1:
            nested[name] = value
        else:
            nested.setdefault(path[0], {})[path[1]] = value

    def nested(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Raw values by setting name, as the model's validation reads them (by group)."""
        nested: dict[str, Any] = {}
        for name, value in values.items():
            self.place(nested, name, value)
        return nested

    def name_at(self, loc: tuple[int | str, ...]) -> str | None:
        """The setting a validation error's location names; None for a check across a group."""
        head = str(loc[0])
        if head not in self.groups:
            return head
        if len(loc) == 1:
            return None
        for key, field in self.groups[head].model_fields.items():
            if str(loc[1]) in {key, field.alias}:
                return field.alias or key
        return None


def _doc(name: str, path: tuple[str, ...], field: FieldInfo) -> SettingDoc:
    return SettingDoc(name, path, field.description or "", field.annotation is SecretStr)
