"""A NodeConfig written back as the YAML mapping of its file (`nri-sla config show` and
`default`): every key of the schema, in the schema's order, each value in a form the
parser takes back unchanged (tests/commands/test_config_command.py holds it to that)."""

from __future__ import annotations

from typing import Any

import yaml

from nri_plugin.config.schema import KEY_ATTRIBUTES, file_value, key_value
from nri_plugin.config.values import NodeConfig


def config_mapping(config: NodeConfig) -> dict[str, Any]:
    """The config as the nested mapping its file would hold."""
    mapping: dict[str, Any] = {}
    for key in KEY_ATTRIBUTES:
        *sections, name = key.split(".")
        target = mapping
        for section in sections:
            target = target.setdefault(section, {})
        target[name] = file_value(key_value(config, key))
    return mapping


def config_yaml(config: NodeConfig) -> str:
    return yaml.safe_dump(config_mapping(config), sort_keys=False, default_flow_style=False)
