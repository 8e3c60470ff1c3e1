"""Helpers for the SLA tests: parse a document and assert on the error it raises."""

from __future__ import annotations

import pytest

from nri_sla.sla import SlaError, parse_sla_document, sla_for_container

POD = "sla.nri.io/pod"


def ctr(name: str) -> str:
    return f"sla.nri.io/container.{name}"


def error_of(text: str, key: str = POD, *, complete: bool = True) -> SlaError:
    """The SlaError that parsing ``text`` as annotation ``key`` raises."""
    with pytest.raises(SlaError) as info:
        parse_sla_document(key, text, complete=complete)
    return info.value


def container_error(annotations: dict[str, str], name: str = "web") -> SlaError:
    with pytest.raises(SlaError) as info:
        sla_for_container(annotations, name)
    return info.value


def assert_error(err: SlaError, key: str, field: str, *fragments: str) -> None:
    """The error names the annotation key and field, and says each fragment (allowed
    values, ranges, the offending value)."""
    text = str(err)
    assert err.key == key, text
    assert err.field == field, text
    prefix = f"{key}: {field} " if field else f"{key}: "
    assert text.startswith(prefix), text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
