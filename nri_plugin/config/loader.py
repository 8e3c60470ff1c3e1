"""The node policy file, ``/etc/nri-sla/config.yaml``, read into a frozen `NodeConfig`.

The file is read with the same hardened YAML reader as annotations (no tags, anchors or
duplicate keys) and checked strictly against `schema`: an unknown key, a wrong type or a
value out of range is a :class:`ConfigError` naming the file, the field path and what is
allowed, e.g. ``/etc/nri-sla/config.yaml: cgroup.driver must be one of auto, cgroupfs,
systemd, got cgroupv2``; every problem of a file is reported at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from nri_plugin.config.schema import REMOVED_KEYS, SECTIONS, TOP, TOP_KEYS, Schema
from nri_plugin.config.values import NodeConfig
from nri_plugin.errors import InvalidInput
from nri_plugin.text.errors import FieldProblem, YamlProblem
from nri_plugin.text.fields import key_text, show, unknown_key_message
from nri_plugin.text.safeyaml import load

TYPE_CHECKING = False  # `typing` costs the OCI hook's cold run; only checkers need it
if TYPE_CHECKING:
    from typing import Any

DEFAULT_PATH = "/etc/nri-sla/config.yaml"
MAX_CONFIG_BYTES = 1024 * 1024


class ConfigError(InvalidInput, ValueError):
    """A problem in the node config: ``source`` (file), ``field`` (dotted path), message."""

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        super().__init__(f"{source}: {field} {message}" if field else f"{source}: {message}")

    def __reduce__(self):
        return (ConfigError, (self.source, self.field, self.message))


def _fields(
    source: str, data: Mapping, schema: Schema, parent: str, errors: list[ConfigError]
) -> dict[str, Any]:
    # each key's converter gave its field's type
    values: dict[str, Any] = {}
    for key, raw in data.items():
        path = f"{parent}.{key_text(key)}" if parent else key_text(key)
        if key in SECTIONS and not parent:
            continue
        if path in REMOVED_KEYS:
            errors.append(ConfigError(source, path, REMOVED_KEYS[path]))
            continue
        if key not in schema:
            errors.append(
                ConfigError(
                    source,
                    path,
                    unknown_key_message(key, tuple(schema) if parent else TOP_KEYS, parent),
                )
            )
            continue
        if raw is None:  # "key:" with no value keeps the default
            continue
        attribute, spec = schema[key]
        try:
            values[attribute] = spec.convert(raw)
        except FieldProblem as exc:
            errors.append(ConfigError(source, path + exc.sub, exc.message))
    return values


def check_config(
    text: str, source: str = "<config>"
) -> tuple[NodeConfig | None, list[ConfigError]]:
    """The config in the text and every problem found, each with its field path (the
    config is None when there is a problem). Empty text gives all defaults."""
    try:
        data = load(text, max_bytes=MAX_CONFIG_BYTES, max_depth=8)
    except YamlProblem as exc:
        return None, [ConfigError(source, exc.path, exc.message)]
    if data is None:
        return NodeConfig(source=source), []
    if not isinstance(data, Mapping):
        return None, [
            ConfigError(source, "", f"must be a YAML mapping of settings, got {show(data)}")
        ]
    errors: list[ConfigError] = []
    top = _fields(source, data, TOP, "", errors)
    for name, (cls, schema) in SECTIONS.items():
        section = data.get(name)
        if section is None:
            continue
        if not isinstance(section, Mapping):
            errors.append(
                ConfigError(
                    source,
                    name,
                    f"must be a mapping with keys {', '.join(schema)}, got {show(section)}",
                )
            )
            continue
        top[name.replace("-", "_")] = cls(**_fields(source, section, schema, name, errors))
    return (None, errors) if errors else (NodeConfig(source=source, **top), [])


def parse_config(text: str, source: str = "<config>") -> NodeConfig:
    """Parse the text of a node config file. Empty text gives all defaults."""
    config, errors = check_config(text, source)
    if len(errors) == 1:
        raise errors[0]
    if errors:  # one error carrying every problem, each with its field path
        rest = "; ".join(str(e).removeprefix(f"{source}: ") for e in errors[1:])
        raise ConfigError(source, errors[0].field, f"{errors[0].message}; {rest}")
    assert config is not None
    return config


def read_config_text(path: str) -> str:
    """The text of a config file that must exist (at most MAX_CONFIG_BYTES + 1 read)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(
            path, "", "does not exist (give an existing file, or no --config for the defaults)"
        ) from None
    except OSError as exc:
        raise ConfigError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:  # worded as validate words a manifest's
        raise ConfigError(path, "", f"cannot be read: not UTF-8 text (byte {exc.start})") from None


def load_config(path: str | None = None) -> NodeConfig:
    """Read the node config. ``None`` reads DEFAULT_PATH when it exists, else defaults;
    an explicitly given path must exist."""
    if path is None:
        if not os.path.exists(DEFAULT_PATH):
            return NodeConfig()
        path = DEFAULT_PATH
    return parse_config(read_config_text(path), path)
