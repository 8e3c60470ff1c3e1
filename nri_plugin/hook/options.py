"""The hook's command line, parsed without argparse (it costs start-up time per container).

`nri-sla hook` (nri_plugin.cli hands it over before any argparse work) and the fast path
`python3 -I -m nri_plugin.hook` are the same entry and share HookOptions.
"""

from nri_plugin.errors import InvalidInput
from nri_plugin.hookspec import DEFAULT_STAGE, STAGES
from nri_plugin.value import Value

DEFAULT_TIMEOUT = 5.0  # seconds; runtimes give hooks their own (often larger) timeout

USAGE = (
    "usage: nri-sla hook [--stage createRuntime|prestart|poststart|createContainer] "
    "[--timeout S] [--config PATH] [--cgroup-root PATH] [--cache-dir DIR|off]"
)
HELP = f"""{USAGE}

OCI hook: reads the OCI state JSON on stdin and enforces the container's SLA in cgroupfs.

  --stage STAGE       the OCI hook stage this hook is installed at (default {DEFAULT_STAGE})
  --timeout S         give up after S seconds, 0 < S <= 300 (default {DEFAULT_TIMEOUT:g})
  --config PATH       node config (default /etc/nri-sla/config.yaml; missing = defaults)
  --cgroup-root PATH  cgroup filesystem root (default: the node config's cgroup.root)
  --cache-dir DIR     decision cache (default $NRI_SLA_HOOK_CACHE, else
                      /run/nri-sla/hook-cache); "off" disables it

exit status: 0 enforced (or soft warnings), 1 SLA refused, 2 bad usage or input,
3 internal error or timeout (hard mode)
"""


class HelpRequested(Exception):
    """-h/--help: print HELP and exit 0."""


class HookOptions(Value):
    """What the command line asked for (see values.py for why not a dataclass)."""

    __slots__ = (
        "cache_dir",
        "cgroup_root",
        "config",
        "proc_root",
        "stage",
        "sysfs_root",
        "timeout",
    )

    def __init__(
        self,
        stage: str = DEFAULT_STAGE,
        timeout: float = DEFAULT_TIMEOUT,
        config: str | None = None,
        cgroup_root: str | None = None,
        sysfs_root: str = "/sys",
        cache_dir: str | None = None,
        proc_root: str = "/proc",
    ) -> None:
        self.stage = stage
        self.timeout = timeout
        # None: /etc/nri-sla/config.yaml when it exists, else the built-in defaults.
        self.config = config
        # None: the node config's cgroup.root (/sys/fs/cgroup).
        self.cgroup_root = cgroup_root
        # Tests point this at a fake NUMA/GPU sysfs tree; not a command-line option.
        self.sysfs_root = sysfs_root
        # None: $NRI_SLA_HOOK_CACHE, else /run/nri-sla/hook-cache; "off": no cache.
        self.cache_dir = cache_dir
        # Tests point this at a fake /proc (<pid>/cgroup into a fake cgroup tree); not a
        # command-line option.
        self.proc_root = proc_root


def check(stage: str, timeout: float) -> None:
    if stage not in STAGES:
        raise InvalidInput(f"--stage: {stage!r} is not one of {', '.join(STAGES)}")
    if not 0 < timeout <= 300:
        raise InvalidInput(f"--timeout: {timeout:g} is outside 0 < S <= 300 seconds")


# `nri-sla hook`'s flags (no argparse: the hook's start-up must stay cheap) -> option.
FLAGS = {
    "--stage": "stage",
    "--timeout": "timeout",
    "--config": "config",
    "--cgroup-root": "cgroup_root",
    "--cache-dir": "cache_dir",
}


def parse_argv(argv: list[str]) -> HookOptions:
    values: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            raise HelpRequested
        name, eq, inline = arg.partition("=")
        if name not in FLAGS:
            raise InvalidInput(f"unknown argument {arg!r}; {USAGE}")
        if eq:
            values[FLAGS[name]] = inline
            i += 1
        elif i + 1 < len(argv):
            values[FLAGS[name]] = argv[i + 1]
            i += 2
        else:
            raise InvalidInput(f"{name} needs a value; {USAGE}")
    try:
        timeout = float(values.get("timeout", DEFAULT_TIMEOUT))
    except ValueError:
        raise InvalidInput(f"--timeout: {values['timeout']!r} is not a number of seconds") from None
    opts = HookOptions(
        stage=values.get("stage", DEFAULT_STAGE),
        timeout=timeout,
        config=values.get("config"),
        cgroup_root=values.get("cgroup_root"),
        cache_dir=values.get("cache_dir"),
    )
    check(opts.stage, opts.timeout)
    if opts.cache_dir not in (None, "off") and not opts.cache_dir.startswith("/"):
        raise InvalidInput(f"--cache-dir: {opts.cache_dir!r} must be an absolute path or 'off'")
    return opts
