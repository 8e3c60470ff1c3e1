"""The test side of tests/support/fake_kubelet.py: start it with one set of stubs, send it
commands, read its answers."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

FAKE_KUBELET = Path(__file__).with_name("fake_kubelet.py")
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Stubs:
    """Which generated modules the fake kubelet is built from."""

    flavour: str  # "project" (nri_plugin/kubelet/pb) or "published" (the kubelet's protos)
    deviceplugin: str  # the *_pb2 module of the device plugin API
    podresources: str  # the *_pb2 module of the PodResources API
    path: Path | None = None  # prepended to sys.path in the fake kubelet


PROJECT_STUBS = Stubs(
    "project",
    "nri_plugin.kubelet.pb.deviceplugin_v1beta1_pb2",
    "nri_plugin.kubelet.pb.podresources_v1_pb2",
)


class KubeletError(AssertionError):
    pass


class FakeKubelet:
    """A fake kubelet process serving kubelet.sock in `plugin_dir` (and PodResources on
    `podresources_socket` when given)."""

    def __init__(
        self, stubs: Stubs, plugin_dir: Path, podresources_socket: Path | None = None
    ) -> None:
        args = [
            sys.executable,
            str(FAKE_KUBELET),
            "--deviceplugin",
            stubs.deviceplugin,
            "--podresources",
            stubs.podresources,
            "--plugin-dir",
            str(plugin_dir),
        ]
        if stubs.path is not None:
            args += ["--stubs-path", str(stubs.path)]
        if podresources_socket is not None:
            args += ["--podresources-socket", str(podresources_socket)]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        self.hello = self._read(30)
        if not self.hello.get("ready"):
            raise KubeletError(f"fake kubelet did not start: {self.hello}")

    def _read(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise KubeletError(f"fake kubelet: no answer within {timeout}s")
        line = self.proc.stdout.readline()
        if not line:
            raise KubeletError(f"fake kubelet exited ({self.proc.wait()})")
        return json.loads(line)

    def command(self, op: str, timeout: float = 10, **fields) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, "timeout": timeout, **fields}) + "\n")
        self.proc.stdin.flush()
        answer = self._read(timeout + 10)
        if "error" in answer:
            raise KubeletError(f"fake kubelet {op}: {answer['error']}")
        return answer

    def registration(self, timeout: float = 10) -> dict:
        return self.command("registration", timeout)["request"]

    def timed_registration(self, timeout: float = 10) -> tuple[dict, float]:
        """The next RegisterRequest and when it came (time.monotonic(), which every
        process of the host shares)."""
        answer = self.command("registration", timeout)
        return answer["request"], answer["at"]

    def next_list(self, timeout: float = 10) -> dict:
        """The next list any plugin sent: its devices, "resource" and "at" (when it came,
        time.monotonic()); or {"stream_ended": code, "resource": ...}."""
        return self.command("next_list", timeout)["list"]

    def call(self, method: str, request: dict | None = None, resource: str = "") -> dict:
        """{"response": ...} or {"code": "INVALID_ARGUMENT", "details": ...}; to the
        plugin of `resource` (default: the last one registered)."""
        return self.command("call", method=method, request=request or {}, resource=resource)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
