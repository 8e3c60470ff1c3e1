"""The runtime's NRI level when its Configure request does not say.

Only runtimes on NRI v0.12 or later send their NRI version in Configure; v0.10 and v0.11
(containerd 2.2, CRI-O 1.34 to 1.36) know the same events as v0.12 but send none, just
like v0.9 and older. What they do send is their own name and release, and each release
vendors one NRI version: the table below (read from each release tag's go.mod) turns
(runtime, release) into the NRI version it speaks. A runtime or release it does not
know stays unversioned, which callers treat as the oldest event set (safe: a
subscription bit the runtime does not know makes it drop the plugin).
"""

from __future__ import annotations

from dataclasses import dataclass

from nri_plugin.nri.events import parse_version

Release = tuple[int, int, int]


@dataclass(frozen=True)
class NriLevel:
    """The NRI version the runtime speaks and where that knowledge came from."""

    version: str  # "v0.11.0"; "" when neither sent nor known
    source: str  # "sent", "<runtime> <release> (release table)" or "unknown"

    def describe(self) -> str:
        if not self.version:
            return "unversioned (older than v0.12)"
        return self.version if self.source == "sent" else f"{self.version}, {self.source}"


# runtime name as sent in Configure -> (first release, vendored NRI version), ascending.
# A release speaks the version of the last row at or below it. CRI-O 1.26.4 to 1.28 and
# 1.33 vendor commits between releases: listed as the release below them (1.33's knows
# UpdatePodSandbox but not ValidateContainerAdjustment, which v0.9 clipping keeps safe).
RUNTIME_NRI: dict[str, tuple[tuple[Release, str], ...]] = {
    "containerd": (
        ((1, 7, 0), "v0.3.0"),
        ((1, 7, 7), "v0.4.0"),
        ((1, 7, 14), "v0.6.0"),
        ((1, 7, 16), "v0.6.1"),
        ((1, 7, 26), "v0.8.0"),  # and 2.0, 2.1
        ((2, 2, 0), "v0.10.0"),
        ((2, 2, 1), "v0.11.0"),
        ((2, 3, 0), "v0.12.0"),  # sends its version; listed for builds that send none
    ),
    "cri-o": (
        ((1, 26, 0), "v0.2.0"),
        ((1, 26, 2), "v0.3.0"),
        ((1, 29, 0), "v0.5.0"),
        ((1, 29, 2), "v0.6.0"),
        ((1, 31, 0), "v0.6.1"),
        ((1, 32, 0), "v0.9.0"),  # and 1.33 (a v0.10 pre-release)
        ((1, 34, 0), "v0.10.0"),
        ((1, 35, 0), "v0.11.0"),  # and 1.36
    ),
}


def nri_level(sent: str, runtime_name: str, runtime_version: str) -> NriLevel:
    """The runtime's NRI level from its Configure request: the version it sent, else the
    one its name and release vendor."""
    if parse_version(sent) is not None:
        return NriLevel(sent, "sent")
    rows = RUNTIME_NRI.get(runtime_name.strip().lower(), ())
    release = parse_version(runtime_version)
    if not rows or release is None or release < rows[0][0]:
        return NriLevel("", "unknown")
    # A release newer than the table vendors at least its last row's version.
    version = [nri for first, nri in rows if first <= release][-1]
    return NriLevel(version, f"{runtime_name} {runtime_version} (release table)")
