"""Helpers for the SLA tests, handed out as the ``check`` fixture (pytest's importlib mode
does not let test modules import this file)."""

from __future__ import annotations

import pytest

from nri_plugin.sla import SlaError, parse_sla_document, sla_for_container


class Check:
    POD = "sla.nri.io/pod"

    @staticmethod
    def ctr(name: str) -> str:
        return f"sla.nri.io/container.{name}"

    @staticmethod
    def error_of(text: str, key: str = "sla.nri.io/pod", *, complete: bool = True) -> SlaError:
        """The SlaError that parsing ``text`` as annotation ``key`` raises."""
        with pytest.raises(SlaError) as info:
            parse_sla_document(key, text, complete=complete)
        return info.value

    @staticmethod
    def container_error(annotations: dict[str, str], name: str = "web") -> SlaError:
        with pytest.raises(SlaError) as info:
            sla_for_container(annotations, name)
        return info.value

    @staticmethod
    def assert_error(err: SlaError, key: str, field: str, *fragments: str) -> None:
        """The error names the annotation key and the field first, then says each
        fragment (allowed values, ranges, the offending value)."""
        text = str(err)
        assert err.key == key, text
        assert err.field == field, text
        prefix = f"{key}: {field} " if field else f"{key}: "
        assert text.startswith(prefix), text
        for fragment in fragments:
            assert fragment in text, f"{fragment!r} not in {text!r}"


@pytest.fixture
def check() -> type[Check]:
    return Check
