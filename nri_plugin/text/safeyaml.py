"""A deliberately small YAML reader for annotation values and the node config file.

Annotations come from anyone who can create a pod, so the reader refuses, before building
any Python object: text over a size limit (checked before parsing), anchors and aliases
(the "billion laughs" expansion), explicit tags (``!!python/object``, ``!!binary``,
custom ``!tags``), nesting deeper than a limit, too many nodes, duplicate mapping keys,
non-string keys and more than one document (``load_all``: more than a given number of
documents, for Kubernetes manifests).

Two readers behind one function: the subset SLA annotations and node configs are written
in (block mappings and lists, plain and simple quoted scalars: `yamlsubset`) is read
without PyYAML, which the OCI hook's cold run would otherwise spend a third of its time
importing; every other text, and every text that is refused, goes to PyYAML's parser
(`yamlevents`), whose results and messages are the reference. A differential test
(tests/text/test_yaml_subset.py) holds the two to the same values. Plain scalars mean
the same in both (`yamlscalars`: the YAML 1.2 core schema).
"""

from __future__ import annotations

from nri_plugin.text.errors import YamlProblem
from nri_plugin.text.yamlscalars import YamlFloat
from nri_plugin.text.yamlsubset import read_subset

__all__ = ["YamlFloat", "load", "load_all"]


def _too_big(text: str, max_bytes: int) -> str | None:
    """Reason the text is refused before parsing, or None."""
    if len(text) > max_bytes:  # a str has at most as many characters as UTF-8 bytes
        return f"is {len(text)} characters; at most {max_bytes} bytes are allowed"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode text (lone surrogate characters)"
    if size > max_bytes:
        return f"is {size} bytes; at most {max_bytes} bytes are allowed"
    return None


def load(text: str, *, max_bytes: int, max_depth: int = 8, max_nodes: int = 4096) -> object:
    """Parse one YAML document safely (see the module doc). Empty text gives None."""
    documents = _load(text, max_bytes, max_depth, max_nodes, max_documents=1)
    return documents[0] if documents else None


def load_all(
    text: str, *, max_bytes: int, max_depth: int, max_nodes: int, max_documents: int
) -> list[object]:
    """Parse a stream of YAML documents safely, with the same refusals as `load`;
    `max_nodes` counts the values of all documents together."""
    return _load(text, max_bytes, max_depth, max_nodes, max_documents)


def _load(
    text: str, max_bytes: int, max_depth: int, max_nodes: int, max_documents: int
) -> list[object]:
    if not isinstance(text, str):
        raise YamlProblem("", f"must be text, got {type(text).__name__}")
    reason = _too_big(text, max_bytes)
    if reason:
        raise YamlProblem("", reason)
    if "\x00" in text:
        raise YamlProblem("", "contains a NUL character")
    if max_documents == 1:
        found = read_subset(text, max_depth, max_nodes)
        if found is not None:
            return found
    from nri_plugin.text.yamlevents import compose  # PyYAML: only outside the subset

    return compose(text, max_depth, max_nodes, max_documents)
