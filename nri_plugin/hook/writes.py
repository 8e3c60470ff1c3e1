"""The hook's cgroupfs writes: one write(2) per value, each read back and compared.

The checks, the write(2) and the read-back are `nri_plugin.enforce.cgfile`, the core of the
plugin's writers too (plain file names only, resource-control files only, the file must
exist and resolve inside the container's cgroup; the kernel's normalisations via
enforce.readback). What is the hook's own: writes as (controller, file, value) tuples and
verify-only mode's drift report. Neither pathlib nor dataclasses: this runs for every
container with an SLA, from a cached decision too.
"""

from __future__ import annotations

import os

from nri_plugin.enforce.cgfile import read_value, write_checked
from nri_plugin.enforce.errors import CgroupFactsError
from nri_plugin.enforce.readback import values_match
from nri_plugin.hook.values import Value

TYPE_CHECKING = False  # typing costs start-up time; only checkers need it
if TYPE_CHECKING:
    from nri_plugin.enforce.errors import CgroupWriteError
    from nri_plugin.hook.cgdirs import ContainerDirs

    Write = tuple[str, str, str]  # controller, file, value


class Result(Value):
    __slots__ = ("error", "ok", "read_back", "write")

    def __init__(self, write: Write, ok: bool, read_back: str | None = None,
                 error: CgroupWriteError | None = None) -> None:
        self.write = write
        self.ok = ok
        self.read_back = read_back
        self.error = error


def apply(writes: list[Write], dirs: ContainerDirs) -> list[Result]:
    """Every write in order, each read back; keeps going after a failure."""
    results = []
    for write in writes:
        ok, read_back, error, _ = write_checked(dirs.version, *write, dirs.dirs)
        results.append(Result(write, ok, read_back, error))
    return results


def drift(writes: list[Write], dirs: ContainerDirs) -> list[str]:
    """Verify-only mode: one text per setting whose file does not hold the planned value."""
    problems = []
    for controller, name, value in writes:
        try:
            path = os.path.join(dirs.dir(controller), name)
            read = read_value(path)
        except (OSError, CgroupFactsError) as exc:  # the setting cannot hold
            problems.append(f"{controller}/{name}: cannot read ({exc})")
            continue
        if not values_match(name, value, read):
            problems.append(f"{path}: expected {value!r}, found {read.strip()!r}")
    return problems
