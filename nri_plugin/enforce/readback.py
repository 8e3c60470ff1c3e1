"""Compare what was written to a cgroup file with what the kernel reads back.

The kernel normalises many values, so a plain string compare would report false failures:
* memory sizes are rounded down to whole pages ("-1"/"max" read back as a huge number or
  "max");
* cpuset lists come back in canonical form ("0,1,2" -> "0-2");
* per-device files (blkio.throttle.*, io.max, io.weight, blkio.bfq.weight_device) list one
  "MAJ:MIN ..." line per device, and a rule set to 0/"max" disappears;
* io.weight / io.bfq.weight on v2 read "default N" for a written "N".

`restore_value` is the inverse the hard mode's undo needs: from a file's content before a
write, the value that puts back what that write changed (for a per-device file, only
that device's line).
"""

PAGE_SIZE = 4096
# v1 reads "unlimited" as PAGE_COUNTER_MAX pages; anything this large is "no limit".
_V1_UNLIMITED_MIN = 1 << 62

# Fixed sets of file names rather than regexes: the OCI hook imports this module on every
# container start, and `import re` (with its enums) costs more than the hook's own work.
_MEMORY_SIZE_FILES = frozenset(
    "memory." + name
    for name in (
        "limit_in_bytes",
        "soft_limit_in_bytes",
        "memsw.limit_in_bytes",
        "kmem.limit_in_bytes",
        "kmem.tcp.limit_in_bytes",
        "max",
        "high",
        "low",
        "min",
        "swap.max",
        "swap.high",
        "zswap.max",
    )
)
_CPUSET_FILES = frozenset(
    {"cpuset.cpus", "cpuset.mems", "cpuset.cpus.exclusive", "cpuset.mems.exclusive"}
)
_WEIGHT_FILES = frozenset({"io.weight", "io.bfq.weight", "blkio.bfq.weight", "blkio.weight"})
_DEVICE_VALUE_FILES = frozenset(
    {
        "blkio.throttle.read_bps_device",
        "blkio.throttle.write_bps_device",
        "blkio.throttle.read_iops_device",
        "blkio.throttle.write_iops_device",
        "blkio.bfq.weight_device",
        "blkio.weight_device",
    }
)


def _name(file: str) -> str:
    # The sets above replaced anchored regexes, whose `$` also matched before one final
    # newline; keep that (a file name never has one, but the semantics stay identical).
    return file[:-1] if file.endswith("\n") else file


def _device_rule(line: str) -> tuple[str, str] | None:
    """A stripped "MAJ:MIN rest" line -> ("MAJ:MIN", rest stripped), else None.

    Decimal digits, a colon, decimal digits, at least one whitespace character, then the
    rest (the same strings the former regex `^(\\d+:\\d+)\\s+(.*)$` accepted)."""
    major, colon, tail = line.partition(":")
    if not colon or not major.isdecimal():
        return None
    end = 0
    while end < len(tail) and tail[end].isdecimal():
        end += 1
    if end == 0 or end == len(tail) or not tail[end].isspace():
        return None
    return f"{major}:{tail[:end]}", tail[end:].strip()


def _memory_matches(written: str, read: str, page_size: int) -> bool:
    w, r = written.strip(), read.strip()
    if w in ("max", "-1"):
        return r == "max" or (
            r.lstrip("-").isdigit() and (int(r) == -1 or int(r) >= _V1_UNLIMITED_MIN)
        )
    try:
        return int(r) == (int(w) // page_size) * page_size
    except ValueError:
        return w == r


def _device_lines(text: str) -> dict[str, str]:
    lines: dict[str, str] = {}
    for line in text.splitlines():
        rule = _device_rule(line.strip())
        if rule:
            lines[rule[0]] = rule[1]
        elif line.strip():
            key, _, rest = line.strip().partition(" ")
            lines[key] = rest.strip()  # "default 100"
    return lines


def _device_value_matches(written: str, read: str) -> bool:
    """blkio.throttle.* and *weight_device: "MAJ:MIN N"; N == 0 removes the rule."""
    key, _, value = written.strip().partition(" ")
    value = value.strip()
    lines = _device_lines(read)
    if value in ("0", "") and key != "default":
        return key not in lines
    return lines.get(key) == value


def _io_max_matches(written: str, read: str) -> bool:
    """v2 io.max "MAJ:MIN rbps=N wbps=max ...": every key written reads back equal."""
    dev, _, rest = written.strip().partition(" ")
    wanted = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
    got_line = _device_lines(read).get(dev)
    got = dict(kv.split("=", 1) for kv in (got_line or "").split() if "=" in kv)
    # A device whose limits are all "max" has no line at all.
    return all(got.get(k, "max") == v for k, v in wanted.items())


def _weight_matches(written: str, read: str) -> bool:
    """io.weight / io.bfq.weight / blkio.bfq.weight: "N", "default N" or "MAJ:MIN N"."""
    w = written.strip()
    if w.isdigit():
        stripped = read.strip()
        if stripped.isdigit():  # v1 blkio.bfq.weight reads a bare number
            return stripped == w
        return _device_lines(read).get("default") == w
    key, _, value = w.partition(" ")
    return _device_lines(read).get(key) == value.strip()


def _cpu_max_matches(written: str, read: str) -> bool:
    w, r = written.split(), read.split()
    if not w or not r:
        return False
    return w[0] == r[0] and (len(w) == 1 or w[1:] == r[1:])


def values_match(file: str, written: str, read: str, page_size: int = PAGE_SIZE) -> bool:
    """Semantic equality of a written value and the file's read-back content."""
    name = _name(file)
    if name in _MEMORY_SIZE_FILES:  # first: an unrounded echo there is not the kernel's
        return _memory_matches(written, read, page_size)
    if written.strip() == read.strip():
        return True  # the common case: the kernel echoes a canonical value as written
    if name in _CPUSET_FILES:
        from nri_plugin.topology.cpulist import parse_cpulist  # only on a re-formatted list

        try:
            return parse_cpulist(written) == parse_cpulist(read)
        except ValueError:
            return False
    if name in _DEVICE_VALUE_FILES:
        return _device_value_matches(written, read)
    if file == "io.max":
        return _io_max_matches(written, read)
    if file in _WEIGHT_FILES:
        return _weight_matches(written, read)
    if file == "cpu.max":
        return _cpu_max_matches(written, read)
    return " ".join(written.split()) == " ".join(read.split())


# What removes a device's rule from a per-device file (no line before the write).
_NO_IO_MAX = "rbps=max wbps=max riops=max wiops=max"


def restore_value(file: str, written: str, before: str) -> str:
    """What to write to `file` to undo writing `written` over the content `before`.

    Per-device files change only the written device's line: its old rule is written
    back, or the rule is removed ("0", "default", all "max") when it had none. A v1
    memory size read as "unlimited" (a page count near 2^63) goes back as "-1".
    """
    name = _name(file)
    old = before.strip()
    if (
        name in _DEVICE_VALUE_FILES
        or file == "io.max"
        or (file in _WEIGHT_FILES and not written.strip().isdigit())
    ):
        key = written.strip().partition(" ")[0]
        line = _device_lines(before).get(key)
        if line is not None:
            return f"{key} {line}"
        if file == "io.max":
            return f"{key} {_NO_IO_MAX}"
        return f"{key} {'default' if file in _WEIGHT_FILES else '0'}"
    if file in _WEIGHT_FILES and not old.isdigit():
        default = _device_lines(before).get("default")
        return default if default is not None else old
    if name in _MEMORY_SIZE_FILES and old.isdigit() and int(old) >= _V1_UNLIMITED_MIN:
        return "-1"
    return old
