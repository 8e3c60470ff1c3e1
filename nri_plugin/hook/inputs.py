"""What the runtime hands the hook, and who the container is.

The OCI state on stdin and the bundle's config.json are both read with a size bound, so a
broken or hostile runtime input cannot make the hook allocate without limit, and every
problem becomes an InvalidInput naming the field.

Who the container is comes from the keys only its runtime writes (never from a pod's own
text).

Pod annotations reach config.json too (containerd copies those its `pod_annotations` globs
match, CRI-O copies all of them, podman takes any `--annotation`), and a pod may name its
annotations like a runtime's keys. So the hook first decides which runtime wrote the spec,
from the container-type key that runtime always sets, and then reads the container's
name and namespace from that runtime's own keys only:

* containerd (CRI): `io.kubernetes.cri.*`, written after the pod annotations it copies;
* CRI-O: `io.kubernetes.cri-o.*` plus kubelet's labels (`io.kubernetes.pod.namespace`,
  `io.kubernetes.container.name`), which CRI-O writes after the pod's annotations, so
  kubelet's value wins. CRI-O sets `io.kubernetes.cri-o.Namespace` on pod sandboxes only:
  in a container's spec it can only be a pod's annotation;
* podman and plain runc: no Kubernetes namespace at all.

The namespace decides the node config's permissions (realtime, io.max, ...). When it
cannot be trusted (both runtimes' keys in one spec, namespace keys that disagree, a
namespace key without any runtime's marker) it is "": only a `*` pattern, a feature open
to every namespace, matches "", so every feature the node grants per namespace is refused
(hard) or dropped (soft), and `distrust` says why.
"""

import posix  # not os: nri_plugin/posixfs.py says why
from _stat import S_ISREG

from nri_plugin.errors import InvalidInput
from nri_plugin.granted import (
    ENV_VISIBLE,
    GrantedResources,
    all_devices_allowed,
    device_mount_ids,
    gpu_device_numbers,
)
from nri_plugin.posixfs import READ_CHUNK, join, read_fd
from nri_plugin.value import Value

TYPE_CHECKING = False  # typing itself costs start-up time; only checkers need it
if TYPE_CHECKING:
    from typing import Any, BinaryIO

STATE_LIMIT = 1 << 20  # 1 MiB: a state is a few hundred bytes plus the annotations
CONFIG_LIMIT = 8 << 20  # 8 MiB: config.json with many mounts/env/annotations
ANNOTATION_LIMIT = 256 << 10  # one annotation value; Kubernetes caps all of them at 256 KiB


# ------------------------------------------------------------------ JSON without `json`
# The hook parses a small state and config.json for every container; `import json` costs
# about as much as the rest of the no-SLA path together (json.decoder compiles regexes at
# import). The C scanner in `_json`, which `json` itself uses, needs only a context object,
# so we drive it directly and fall back to `json` where `_json` is missing. Here rather
# than in a module of its own: each module imported costs a cached run ~0.4 M instructions.

_WHITESPACE = " \t\n\r"


class JsonError(InvalidInput, ValueError):
    """Text that is not one valid JSON document; the message names the position."""


def _no_constants(name: str) -> object:
    raise JsonError(f"{name} is not valid JSON")


class _Context:
    """The attributes `_json.make_scanner` reads (those of json.JSONDecoder)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constants)


_scanner = None


def loads(text: str) -> object:
    """Parse one JSON document; raises JsonError (a ValueError) naming the position."""
    global _scanner
    if _scanner is None:
        try:
            from _json import make_scanner
        except ImportError:  # pragma: no cover - interpreters without the C accelerator
            return _slow(text)
        # typeshed takes a make_scanner for the context; the C code reads these
        # attributes off any object (typeshed's own TODO says so)
        _scanner = make_scanner(_Context)  # type: ignore[arg-type]
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scanner(text, start)
    except JsonError:
        raise
    except Exception:
        # Malformed input: the C scanner's own errors need json.decoder imported (and are
        # not all proper exceptions without it), so let `json` say what is wrong.
        return _slow(text)
    if end < len(text.rstrip(_WHITESPACE)):
        return _slow(text)  # extra data after the document
    return value


def _slow(text: str) -> object:
    import json

    try:
        return json.loads(text, parse_constant=_no_constants)
    except JsonError:
        raise
    except ValueError as exc:
        raise JsonError(str(exc)) from None


# ------------------------------------------------------------------ the OCI state and spec


class OciState(Value):
    """The OCI runtime state (runtime-spec runtime.md#state)."""

    __slots__ = ("annotations", "bundle", "id", "pid", "status")

    def __init__(
        self, id: str, status: str, bundle: str, pid: int | None, annotations: dict[str, str]
    ) -> None:
        self.id = id
        self.status = status
        self.bundle = bundle
        self.pid = pid
        self.annotations = annotations


class BundleSpec(Value):
    """The parts of <bundle>/config.json the hook uses."""

    __slots__ = ("annotations", "cgroups_path", "granted")

    def __init__(
        self, annotations: dict[str, str], cgroups_path: str | None, granted: GrantedResources
    ) -> None:
        self.annotations = annotations
        self.cgroups_path = cgroups_path
        self.granted = granted  # what the runtime set: linux.resources, GPU evidence


def read_bounded(stream: "BinaryIO", limit: int, what: str) -> bytes:
    # In READ_CHUNK steps: one read of limit + 1 bytes (1 MiB for the state) makes the
    # interpreter map a buffer that large, and then shrink and unmap it (three system
    # calls and their page-table work), for a state of a few hundred bytes.
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(min(READ_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return _bounded(b"".join(chunks), limit, what)


def _bounded(data: bytes, limit: int, what: str) -> bytes:
    if len(data) > limit:
        raise InvalidInput(f"{what} is larger than {limit} bytes")
    return data


def _annotations(value: "Any", where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(f"{where}: annotations must be an object of strings")
    for key, val in value.items():
        if not isinstance(val, str):
            raise InvalidInput(
                f"{where}: annotation {key!r} must be a string, got {type(val).__name__}"
            )
        if len(val) > ANNOTATION_LIMIT:
            raise InvalidInput(
                f"{where}: annotation {key!r} is longer than {ANNOTATION_LIMIT} bytes"
            )
    return value


def _json_object(data: bytes, what: str) -> "dict[str, Any]":
    try:
        doc = loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON (not UTF-8 at byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"{what} is not valid JSON ({str(exc)[:100]})") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"{what} must be a JSON object, got {type(doc).__name__}")
    return doc


def parse_state(data: bytes) -> OciState:
    """Parse the state JSON; `bundle` is required, `pid` only where the stage has one."""
    doc = _json_object(data, "OCI state on stdin")
    cid = doc.get("id")
    if not isinstance(cid, str) or not cid:
        raise InvalidInput("OCI state: 'id' must be a non-empty string")
    bundle = doc.get("bundle")
    if not isinstance(bundle, str) or not bundle:
        raise InvalidInput("OCI state: 'bundle' must be a non-empty string (the bundle path)")
    if not bundle.startswith("/"):
        raise InvalidInput(f"OCI state: 'bundle' must be an absolute path, got {bundle[:120]!r}")
    pid = doc.get("pid")
    # bool is an int subclass: reject it explicitly.
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
        raise InvalidInput(f"OCI state: 'pid' must be a positive integer, got {pid!r:.40}")
    status = doc.get("status", "")
    if not isinstance(status, str):
        raise InvalidInput("OCI state: 'status' must be a string")
    return OciState(
        id=cid,
        status=status,
        bundle=bundle,
        pid=pid,
        annotations=_annotations(doc.get("annotations"), "OCI state"),
    )


def read_state(stream: "BinaryIO", limit: int = STATE_LIMIT) -> OciState:
    return parse_state(read_bounded(stream, limit, "OCI state on stdin"))


def load_bundle(bundle: str, limit: int = CONFIG_LIMIT) -> BundleSpec:
    """Load <bundle>/config.json: a regular file, not a symlink, at most `limit` bytes."""
    path = join(bundle, "config.json")
    try:
        fd = posix.open(
            path, posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC | posix.O_NONBLOCK
        )
    except FileNotFoundError:
        raise InvalidInput(f"bundle {bundle[:200]!r} has no config.json") from None
    except OSError as exc:
        raise InvalidInput(f"cannot open {path[:200]!r}: {exc.strerror}") from None
    if not S_ISREG(posix.fstat(fd).st_mode):
        posix.close(fd)
        raise InvalidInput(f"{path[:200]!r} is not a regular file")
    try:
        data = read_fd(fd, limit + 1)
    finally:
        posix.close(fd)
    return parse_config(_bounded(data, limit, f"{path[:200]!r}"), path)


def parse_config(data: bytes, path: str = "config.json") -> BundleSpec:
    doc = _json_object(data, path)
    linux = doc.get("linux")
    if linux is None:
        linux = {}
    if not isinstance(linux, dict):
        raise InvalidInput(f"{path}: 'linux' must be an object")
    cgroups_path = linux.get("cgroupsPath")
    if cgroups_path is not None and not isinstance(cgroups_path, str):
        raise InvalidInput(f"{path}: linux.cgroupsPath must be a string")
    return BundleSpec(
        annotations=_annotations(doc.get("annotations"), path),
        cgroups_path=cgroups_path or None,
        granted=_granted(linux.get("resources"), _gpu_evidence(doc, linux), path),
    )


def _gpu_evidence(doc: "dict[str, Any]", linux: "dict[str, Any]") -> "dict[str, Any]":
    """The GPU evidence in config.json (GrantedResources' keyword arguments): the runtime
    resolved the CRI's CDI devices into linux.devices and mounts already; cdi.k8s.io/*
    annotations are not read (a pod sets annotations). Entries of the wrong shape are no
    evidence; every list is bounded before it is read (nri_plugin.granted)."""
    devices = linux.get("devices")
    mounts = doc.get("mounts")
    process = doc.get("process")
    env = process.get("env") if isinstance(process, dict) else None
    gpus, caps = gpu_device_numbers(
        (
            d["path"] if isinstance(d.get("path"), str) else "",
            d.get("type"),
            d["major"],  # ints: the condition below
            d["minor"],
        )
        for d in (devices if isinstance(devices, list) else ())
        if isinstance(d, dict) and type(d.get("major")) is int and type(d.get("minor")) is int
    )
    evidence: dict[str, Any] = {
        "gpu_devices": gpus,
        "caps_minors": caps,
        "device_mounts": device_mount_ids(
            (m["destination"], m.get("source"))
            for m in (mounts if isinstance(mounts, list) else ())
            if isinstance(m, dict) and isinstance(m.get("destination"), str)
        ),
    }
    resources = linux.get("resources")
    rules = resources.get("devices") if isinstance(resources, dict) else None
    if isinstance(rules, list) and (gpus or caps):
        evidence["all_devices"] = all_devices_allowed(
            (
                r.get("allow") is True,
                r.get("type") or "",
                r.get("major") is not None or r.get("minor") is not None,
                r["access"] if isinstance(r.get("access"), str) else "",
            )
            for r in rules
            if isinstance(r, dict)
        )
    if isinstance(env, list):
        for item in env:
            # The runtime's own env list; only well-formed NAME=VALUE entries matter here.
            if isinstance(item, str) and item.startswith(ENV_VISIBLE + "="):
                evidence["env_gpus"] = item.partition("=")[2]
    return evidence


def _section(parent: "dict[str, Any]", name: str, where: str) -> "dict[str, Any]":
    value = parent.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(f"{where}.{name} must be an object")
    return value


def _granted(resources: "Any", evidence: "dict[str, Any]", path: str) -> GrantedResources:
    """linux.resources as the runtime wrote it (the kubelet's limits, runtime-spec
    config-linux.md#control-groups); a value of the wrong type is refused, not guessed."""
    if resources is None:
        resources = {}
    if not isinstance(resources, dict):
        raise InvalidInput(f"{path}: linux.resources must be an object")
    where = f"{path}: linux.resources"
    cpu = _section(resources, "cpu", where)
    memory = _section(resources, "memory", where)
    numbers = {}
    for section, name, field in (
        (cpu, "cpu", "quota"),
        (cpu, "cpu", "period"),
        (cpu, "cpu", "shares"),
        (memory, "memory", "limit"),
    ):
        value = section.get(field)
        # bool is an int subclass: refuse it explicitly.
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidInput(f"{where}.{name}.{field} must be an integer, got {value!r:.40}")
        numbers[f"{name}_{field}"] = value
    return GrantedResources(
        cpu_quota=numbers["cpu_quota"],
        cpu_period=numbers["cpu_period"],
        cpu_shares=numbers["cpu_shares"],
        memory_limit=numbers["memory_limit"],
        **evidence,
    )


# ------------------------------------------------------------------ who the container is

CONTAINERD_PREFIX = "io.kubernetes.cri."
CRIO_PREFIX = "io.kubernetes.cri-o."
CONTAINERD_TYPE = "io.kubernetes.cri.container-type"
CRIO_TYPE = "io.kubernetes.cri-o.ContainerType"
# runtime -> (container-type key, container name, pod namespace, pod name)
RUNTIME_KEYS = {
    "containerd": (
        CONTAINERD_TYPE,
        "io.kubernetes.cri.container-name",
        "io.kubernetes.cri.sandbox-namespace",
        "io.kubernetes.cri.sandbox-name",
    ),
    "cri-o": (
        CRIO_TYPE,
        "io.kubernetes.container.name",
        "io.kubernetes.pod.namespace",
        "io.kubernetes.pod.name",
    ),
}
# Every key that names a namespace: any of them next to the runtime's own must agree.
NAMESPACE_KEYS = (
    "io.kubernetes.cri.sandbox-namespace",
    "io.kubernetes.pod.namespace",
    "io.kubernetes.cri-o.Namespace",
)


class Target(Value):
    __slots__ = ("distrust", "id", "name", "namespace", "pod", "sandbox")

    def __init__(
        self, id: str, name: str, namespace: str, sandbox: bool, pod: str = "", distrust: str = ""
    ) -> None:
        self.id = id
        self.name = name
        self.namespace = namespace  # "" when unknown: see the module docstring
        self.sandbox = sandbox
        self.pod = pod
        self.distrust = distrust  # why the namespace keys were not believed, or ""


def _runtime(annotations: dict[str, str]) -> tuple[str, str]:
    """(runtime, distrust): the runtime whose container-type key is set and whose rival's
    keys are absent; ("", why) when the keys contradict each other."""
    containerd = any(k.startswith(CONTAINERD_PREFIX) for k in annotations)
    crio = any(k.startswith(CRIO_PREFIX) for k in annotations)
    if containerd and crio:
        return "", (
            "the spec carries both containerd's (io.kubernetes.cri.*) and CRI-O's "
            "(io.kubernetes.cri-o.*) keys"
        )
    if CONTAINERD_TYPE in annotations:
        return "containerd", ""
    if CRIO_TYPE in annotations:
        return "cri-o", ""
    named = [k for k in NAMESPACE_KEYS if k in annotations]
    if named:
        return "", f"{named[0]} is set but no runtime's container-type key is"
    return "", ""


def _show(value: str) -> str:
    return repr(value if len(value) <= 63 else value[:60] + "...")


def identify(container_id: str, annotations: dict[str, str]) -> Target:
    runtime, distrust = _runtime(annotations)
    if runtime:
        type_key, name_key, ns_key, pod_key = RUNTIME_KEYS[runtime]
        namespace = annotations.get(ns_key, "")
        for other in NAMESPACE_KEYS:
            if other != ns_key and annotations.get(other, namespace) != namespace:
                distrust = (
                    f"{other}={_show(annotations[other])} contradicts {runtime}'s "
                    f"{ns_key}={_show(namespace)}"
                )
                namespace = ""
                break
        return Target(
            id=container_id,
            name=annotations.get(name_key) or container_id,
            namespace=namespace,
            sandbox=annotations.get(type_key) == "sandbox",
            pod=annotations.get(pod_key, ""),
            distrust=distrust,
        )
    # No runtime to believe: names only label the logs and pick among the pod's own SLA
    # documents, so any runtime's key will do; the namespace stays unknown.
    keys = RUNTIME_KEYS.values()
    name = next((annotations[k[1]] for k in keys if annotations.get(k[1])), container_id)
    pod = next((annotations[k[3]] for k in keys if annotations.get(k[3])), "")
    sandbox = any(annotations.get(k[0]) == "sandbox" for k in keys)
    return Target(
        id=container_id, name=name, namespace="", sandbox=sandbox, pod=pod, distrust=distrust
    )


def has_sla(annotations: dict[str, str], name: str) -> bool:
    """Cheap pre-check before importing the SLA parser (and yaml): may there be an SLA for
    this container? `<prefix>/pod` or `<prefix>/container.<name>` under any prefix (the
    node config may change `sla.nri.io`; the parser decides). Pod annotations reach every
    container, so another container's `container.<other>` key alone does not count."""
    mine = "/container." + name
    return any(k.endswith("/pod") or k.endswith(mine) for k in annotations)
