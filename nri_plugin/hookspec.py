"""Where the hook goes: OCI config.json hook entries and the NRI ContainerAdjustment form.

Pure functions (no I/O) so the plugin (`nri-sla run`, injecting the hook through NRI's
ContainerAdjustment.hooks), the packaging files in hooks/ and the tests share one truth.
"""

from nri_plugin.errors import InvalidInput
from nri_plugin.posixfs import abspath, basename, dirname, isabs, join

TYPE_CHECKING = False  # importing typing costs the no-SLA path more than the rest of it
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

# OCI stage name -> field of NRI's Hooks message (api.proto: prestart, create_runtime, ...).
STAGES: dict[str, str] = {
    "createRuntime": "create_runtime",
    "prestart": "prestart",
    "poststart": "poststart",
    "createContainer": "create_container",
}
# createContainer runs inside the container's namespaces: the state's pid is in the
# container's pid namespace there (runc passes its getpid(), 1), not in the hook's /proc.
IN_CONTAINER_STAGES = ("createContainer",)
# Recommended stage: runs in the runtime namespace, after runc has created and configured
# the container's cgroup, before the user's process exists (see docs/hook.md).
DEFAULT_STAGE = "createRuntime"
DEFAULT_BINARY = "/usr/bin/nri-sla"
# What the runtime waits for the hook (seconds); the hook's own limit is below it so the
# hook fails with its own message instead of being killed by the runtime.
RUNTIME_TIMEOUT = 10
HOOK_TIMEOUT = 5


# runc fails a container whose hook binary is missing. The base runtime spec outlives the
# package (a conffile: `apt remove` keeps it, and containerd keeps what it loaded until it
# restarts), so its hook runs through /bin/sh, which is always there, and does nothing
# once nri-sla is gone: `sh -c SCRIPT $0 BINARY hook ARGS...`.
SHELL = "/bin/sh"
IF_INSTALLED = 'test -x "$1" || exit 0; exec "$@"'
IF_INSTALLED_NAME = "nri-sla-hook-if-installed"  # $0: what ps and runc's errors show


class HookSpecError(InvalidInput, ValueError):
    """A hook stage or path nri-sla cannot put into a hook entry (config or flags)."""


def _check_stage(stage: str) -> None:
    if stage not in STAGES:
        raise HookSpecError(f"stage {stage!r} is not one of {', '.join(STAGES)}")


def hook_entry(
    stage: str = DEFAULT_STAGE,
    binary: str = DEFAULT_BINARY,
    timeout: int = RUNTIME_TIMEOUT,
    if_installed: bool = False,
) -> "dict[str, Any]":
    """One OCI hook object (runtime-spec config.md#posix-platform-hooks). `if_installed`:
    through /bin/sh, exiting 0 when `binary` is not there (see SHELL)."""
    _check_stage(stage)
    if not isabs(binary):
        raise HookSpecError(f"hook binary must be an absolute path, got {binary!r}")
    command = ["hook", "--stage", stage, "--timeout", str(min(HOOK_TIMEOUT, max(timeout - 1, 1)))]
    if if_installed:
        return {
            "path": SHELL,
            "args": ["sh", "-c", IF_INSTALLED, IF_INSTALLED_NAME, binary, *command],
            "timeout": timeout,
        }
    return {"path": binary, "args": [basename(binary), *command], "timeout": timeout}


def oci_hooks(stage: str = DEFAULT_STAGE, binary: str = DEFAULT_BINARY) -> "dict[str, Any]":
    """The `hooks` object of a config.json: containerd's base_runtime_spec, which may
    outlive the installation, hence the if-installed form."""
    return {stage: [hook_entry(stage, binary, if_installed=True)]}


def hook_spec(stage: str = DEFAULT_STAGE, binary: str = DEFAULT_BINARY) -> "dict[str, Any]":
    """The hook as NRI's ContainerAdjustment.hooks wants it: {hooks-field: [Hook]}.

    Keys and values follow nri api.proto's `Hooks`/`Hook` (path, args, env, timeout), so
    the plugin can build the adjustment with `Hooks(**{k: [Hook(**h) ...]})`; `timeout`
    is NRI's OptionalInt, given here as a plain int.
    """
    entry = hook_entry(stage, binary)
    entry["env"] = []
    return {STAGES[stage]: [entry]}


def fast_hook_entry(
    stage: str = DEFAULT_STAGE,
    python: str = "/usr/bin/python3",
    script: str | None = None,
    timeout: int = RUNTIME_TIMEOUT,
) -> "dict[str, Any]":
    """The hook as `python3 -I -S -X utf8 <nri_plugin/hook/__main__.py>`: no site, no
    console-script wrapper, no argparse: its fastest start (docs/hook.md has the figures
    against a bare interpreter). `script` defaults to this installation's __main__.py."""
    _check_stage(stage)
    if script is None:
        script = join(dirname(abspath(__file__)), "hook", "__main__.py")
    for path in (python, script):
        if not isabs(path):
            raise HookSpecError(f"hook paths must be absolute, got {path!r}")
    return {
        "path": python,
        # argv[0] is the full path: the interpreter finds its prefix (stdlib, extension
        # modules) from it, and a bare "python3" is looked up on the hook's PATH instead.
        # -X utf8: the hook's text is UTF-8 whatever locale the runtime passes on, and the
        # interpreter decodes its argv and paths itself instead of through the C library's
        # locale conversions (~1.5 M instructions a run under a UTF-8 LANG: docs/hook.md).
        "args": [
            python,
            "-I",
            "-S",
            "-X",
            "utf8",
            script,
            "--stage",
            stage,
            "--timeout",
            str(min(HOOK_TIMEOUT, max(timeout - 1, 1))),
        ],
        "timeout": timeout,
    }


def is_sla_hook(path: str, args: "Sequence[str]") -> bool:
    """Whether an OCI hook entry runs the nri-sla hook, in any of the forms above
    (`nri-sla hook ...`, its if-installed shell form, `python3 -I -S -X utf8
    .../nri_plugin/hook/__main__.py ...`), e.g. from
    containerd's base_runtime_spec: such a container was enforced by the hook."""
    if basename(path) == basename(DEFAULT_BINARY):
        return "hook" in args[1:2]
    if path == SHELL and list(args[2:4]) == [IF_INSTALLED, IF_INSTALLED_NAME]:
        return list(args[5:6]) == ["hook"]
    return any(
        a.endswith(join("nri_plugin", "hook", "__main__.py")) or a == "nri_plugin.hook"
        for a in args
    )


def hooks_d_document(
    stage: str = DEFAULT_STAGE,
    binary: str = DEFAULT_BINARY,
    annotation_regex: str = r"^sla\.nri\.io/(pod|container\..+)$",
) -> "dict[str, Any]":
    """An oci-hooks(5) hooks.d file (CRI-O, podman): injected only when an SLA is present."""
    entry = hook_entry(stage, binary)
    return {
        "version": "1.0.0",
        "hook": entry,
        "when": {"annotations": {annotation_regex: ".*"}},
        "stages": [stage],
    }
