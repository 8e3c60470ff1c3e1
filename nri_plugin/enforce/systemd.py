"""The systemd cgroup driver's cgroups_path form, expanded to a cgroup directory path.

With the systemd driver the OCI ``linux.cgroupsPath`` is ``slice:prefix:name`` (runc's
convention, also used by containerd and CRI-O). The container then lives in the unit
``<prefix>-<name>.scope`` (or in ``name`` itself when it ends in ``.slice``) inside
``slice``; an empty slice means ``system.slice`` and ``-.slice``/``-`` is the root slice.
systemd nests slices by dashes: ``a-b-c.slice`` lives at ``/a.slice/a-b.slice/a-b-c.slice``.
"""


from nri_plugin.enforce.errors import CgroupPathError

_SLICE = ".slice"


def is_systemd_form(cgroups_path: str) -> bool:
    """True for ``slice:prefix:name`` (exactly two colons, no leading slash)."""
    return not cgroups_path.startswith("/") and cgroups_path.count(":") == 2


def expand_slice(cgroups_path: str, slice_name: str) -> str:
    """``a-b.slice`` -> ``/a.slice/a-b.slice``; ``-.slice`` -> ``/``."""
    if slice_name in ("-", "-.slice"):
        return "/"
    if not slice_name.endswith(_SLICE) or len(slice_name) == len(_SLICE):
        raise CgroupPathError(cgroups_path, f"slice {slice_name!r} must be '<name>.slice'")
    if "/" in slice_name:
        raise CgroupPathError(cgroups_path, f"slice {slice_name!r} must not contain '/'")
    stem = slice_name[: -len(_SLICE)]
    if stem.startswith("-") or stem.endswith("-") or "--" in stem:
        # systemd refuses these unit names: every dash must separate two path components.
        raise CgroupPathError(
            cgroups_path, f"slice {slice_name!r}: dashes must separate non-empty components"
        )
    parts = stem.split("-")
    out = []
    for i in range(len(parts)):
        out.append("-".join(parts[: i + 1]) + _SLICE)
    return "/" + "/".join(out)


def systemd_cgroup_path(cgroups_path: str) -> str:
    """Expand ``slice:prefix:name`` to the container's path inside each hierarchy."""
    if not is_systemd_form(cgroups_path):
        raise CgroupPathError(cgroups_path, "expected the systemd form 'slice:prefix:name'")
    slice_name, prefix, name = cgroups_path.split(":")
    if not name:
        raise CgroupPathError(cgroups_path, "the name part of 'slice:prefix:name' is empty")
    for label, part in (("prefix", prefix), ("name", name)):
        if "/" in part or part in (".", ".."):
            raise CgroupPathError(cgroups_path, f"{label} {part!r} must be a plain unit name")
    base = expand_slice(cgroups_path, slice_name or "system.slice")
    unit = name if name.endswith(_SLICE) else f"{prefix}-{name}.scope"
    return base.rstrip("/") + "/" + unit
