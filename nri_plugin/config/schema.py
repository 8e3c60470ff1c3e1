"""The tables of the node config's keys, derived from the fields of `values` that declare
one (`convert.key`): the top-level keys and each section's, each to the `NodeConfig`
attribute it sets and its converter (`TOP`, `SECTIONS`: what `loader` checks a file
against), every dotted key to its attributes (`KEY_ATTRIBUTES`) and its declaration
(`KEYS`), and the keys a SIGHUP applies (`LIVE_KEYS`).
"""

from __future__ import annotations

from nri_plugin.config.cap import Cap
from nri_plugin.config.convert import METADATA, Key
from nri_plugin.config.values import NodeConfig
from nri_plugin.value import fields

# Removed keys: nri-sla no longer chooses GPUs in the NRI plugin or the hook (the kubelet
# grants them), so there is nothing left for them to allow or cap. An old file that still sets
# one is refused with this line (a silently ignored security setting would mislead).
REMOVED_KEYS = {
    "permissions.ungranted-gpus": "was removed: nri-sla no longer gives GPUs to containers "
    "(a container opens exactly its device plugin's grant); "
    "delete the key",
    "pod-caps.gpus": "was removed: the kubelet counts GPUs (resources.limits nvidia.com/gpu);"
    " delete the key",
}

# key as written in the file -> (dataclass attribute, what its field declares)
Schema = dict[str, tuple[str, Key]]


def _schema(cls: type) -> Schema:
    return {
        (spec.name or f.name.replace("_", "-")): (f.name, spec)
        for f in fields(cls)
        if (spec := f.metadata.get(METADATA))
    }


TOP: Schema = _schema(NodeConfig)


def _sections() -> dict[str, tuple[type, Schema]]:
    """A section is a field of NodeConfig whose value is a value class (its default_factory)."""
    sections: dict[str, tuple[type, Schema]] = {}
    for f in fields(NodeConfig):
        if isinstance(cls := f.default_factory, type):
            sections[f.name.replace("_", "-")] = (cls, _schema(cls))
    return sections


SECTIONS = _sections()
TOP_KEYS: tuple[str, ...] = (*TOP, *SECTIONS)
# Every dotted key as written in the file -> its attributes on NodeConfig, its declaration.
KEY_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    **{key: (attribute,) for key, (attribute, _) in TOP.items()},
    **{
        f"{section}.{key}": (section.replace("-", "_"), attribute)
        for section, (_, schema) in SECTIONS.items()
        for key, (attribute, _) in schema.items()
    },
}
KEYS: dict[str, Key] = {
    **{key: spec for key, (_, spec) in TOP.items()},
    **{
        f"{section}.{key}": spec
        for section, (_, schema) in SECTIONS.items()
        for key, (_, spec) in schema.items()
    },
}
LIVE_KEYS: frozenset[str] = frozenset(key for key, spec in KEYS.items() if spec.live)


def key_value(config: NodeConfig, key: str) -> object:
    """The value of a dotted key in `config`."""
    value: object = config
    for attribute in KEY_ATTRIBUTES[key]:
        value = getattr(value, attribute)
    return value


def file_value(value: object) -> object:
    """A key's value as its file writes it: the form its converter takes back unchanged."""
    if isinstance(value, Cap):
        return str(value) if value.percent else int(value.value)
    if isinstance(value, tuple):
        return list(value)
    if value is None:  # detected at start
        return "auto"
    return value
