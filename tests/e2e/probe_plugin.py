"""A minimal external NRI plugin used only to check the e2e harness itself.

It is deliberately independent of nri_plugin's transport (only the generated protobuf
modules are shared), so that a failing e2e run tells whether the environment (containerd,
runc, cgroups, images) or the project's plugin is at fault.

Behaviour: registers as `<idx>-<name>`, subscribes to CreateContainer only, answers
Synchronize with no updates, and for CreateContainer adjusts the container from three
pod annotations when present (`e2e.nri-sla.io/cpu-quota`, `.../cpu-period`,
`.../memory-limit`, plain integers) and always adds the container annotation
`e2e.nri-sla.io/probe=seen`. When the runtime goes away it dials again every 0.2 s.
With `--sabotage` it also takes StartContainer, and removes the cgroup v1 controller
directory named by the pod annotation `e2e.nri-sla.io/remove-cgroup` (e.g. `blkio`) from
under the container (its processes moved to the parent first): the cgroup a later plugin
writes into is gone between create and start, as when something else on the node deletes
it.
Every step is printed as one line on stdout ("registered", "synchronized ...", ...), which
the tests read.

    python tests/e2e/probe_plugin.py --socket /tmp/x/nri.sock [--name e2e-probe --idx 10]
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time
from pathlib import Path

from nri_plugin.nri.pb import nri_pb2, ttrpc_pb2

MUX = struct.Struct(">II")  # conn id, payload length
TTRPC = struct.Struct(">IIBB")  # data length, stream id, type, flags
PLUGIN_CONN, RUNTIME_CONN = 1, 2
REQUEST, RESPONSE = 1, 2
MAX_FRAME = 4096  # containerd reads one mux frame into a 4 KiB buffer
PLUGIN_SVC = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SVC = "nri.pkg.api.v1alpha1.Runtime"
CREATE_CONTAINER_MASK = 1 << (4 - 1)
START_CONTAINER_MASK = 1 << (6 - 1)
ANN = "e2e.nri-sla.io/"
REMOVE_CGROUP = ANN + "remove-cgroup"
CGROUP_V1_ROOT = Path("/sys/fs/cgroup")


def say(msg: str) -> None:
    print(msg, flush=True)


def frame(conn: int, stream: int, type_: int, data: bytes) -> bytes:
    msg = TTRPC.pack(len(data), stream, type_, 0) + data
    return b"".join(
        MUX.pack(conn, len(msg[i : i + MAX_FRAME])) + msg[i : i + MAX_FRAME]
        for i in range(0, len(msg), MAX_FRAME)
    )


class Streams:
    """Reassembles the two logical byte streams and cuts them into ttrpc messages."""

    def __init__(self) -> None:
        self.raw = b""
        self.conns: dict[int, bytes] = {PLUGIN_CONN: b"", RUNTIME_CONN: b""}

    def feed(self, data: bytes) -> list[tuple[int, int, int, bytes]]:
        self.raw += data
        while len(self.raw) >= MUX.size:
            conn, n = MUX.unpack_from(self.raw)
            if len(self.raw) < MUX.size + n:
                break
            if conn in self.conns:
                self.conns[conn] += self.raw[MUX.size : MUX.size + n]
            self.raw = self.raw[MUX.size + n :]
        out = []
        for conn, buf in self.conns.items():
            while len(buf) >= TTRPC.size:
                n, sid, type_, _ = TTRPC.unpack_from(buf)
                if len(buf) < TTRPC.size + n:
                    break
                out.append((conn, sid, type_, buf[TTRPC.size : TTRPC.size + n]))
                buf = buf[TTRPC.size + n :]
            self.conns[conn] = buf
        return out


def adjust(req: nri_pb2.CreateContainerRequest) -> nri_pb2.CreateContainerResponse:
    ann = req.pod.annotations
    resp = nri_pb2.CreateContainerResponse()
    resp.adjust.annotations[ANN + "probe"] = "seen"
    res = resp.adjust.linux.resources
    if ANN + "cpu-quota" in ann:
        res.cpu.quota.value = int(ann[ANN + "cpu-quota"])
    if ANN + "cpu-period" in ann:
        res.cpu.period.value = int(ann[ANN + "cpu-period"])
    if ANN + "memory-limit" in ann:
        res.memory.limit.value = int(ann[ANN + "memory-limit"])
    return resp


def remove_cgroup(req: nri_pb2.StartContainerRequest | nri_pb2.StateChangeEvent) -> None:
    """Move the container's processes up and remove its cgroup of one v1 controller
    (cgroupfs driver paths: /parent/pod<uid>/<id>)."""
    controller = req.pod.annotations.get(REMOVE_CGROUP)
    if not controller:
        return
    d = CGROUP_V1_ROOT / controller / req.container.linux.cgroups_path.lstrip("/")
    for pid in (d / "cgroup.procs").read_text().split():
        (d.parent / "cgroup.procs").write_text(pid)
    os.rmdir(d)
    say(f"removed {d}")


def serve(method: str, payload: bytes, sabotage: bool = False) -> bytes:
    if method == "Configure":
        cfg = nri_pb2.ConfigureRequest.FromString(payload)
        say(f"configured runtime={cfg.runtime_name} version={cfg.runtime_version}")
        events = CREATE_CONTAINER_MASK | (START_CONTAINER_MASK if sabotage else 0)
        return nri_pb2.ConfigureResponse(events=events).SerializeToString()
    if method == "Synchronize":
        sync = nri_pb2.SynchronizeRequest.FromString(payload)
        say(
            f"synchronized pods={len(sync.pods)} containers={len(sync.containers)} more={sync.more}"
        )
        return nri_pb2.SynchronizeResponse(more=sync.more).SerializeToString()
    if method == "CreateContainer":
        req = nri_pb2.CreateContainerRequest.FromString(payload)
        say(f"create pod={req.pod.name} container={req.container.name}")
        return adjust(req).SerializeToString()
    if method == "StartContainer":
        remove_cgroup(nri_pb2.StartContainerRequest.FromString(payload))
        return nri_pb2.StartContainerResponse().SerializeToString()
    if method == "StateChange":  # NRI before v0.10 (containerd 1.7) sends starts this way
        event = nri_pb2.StateChangeEvent.FromString(payload)
        if event.event == nri_pb2.START_CONTAINER:
            remove_cgroup(event)
    return nri_pb2.Empty().SerializeToString()  # Shutdown, StateChange, ...


def session(sock: socket.socket, name: str, idx: str, sabotage: bool) -> None:
    reg = nri_pb2.RegisterPluginRequest(plugin_name=name, plugin_idx=idx)
    call = ttrpc_pb2.Request(
        service=RUNTIME_SVC, method="RegisterPlugin", payload=reg.SerializeToString()
    )
    sock.sendall(frame(RUNTIME_CONN, 1, REQUEST, call.SerializeToString()))
    streams = Streams()
    while data := sock.recv(65536):
        for conn, sid, type_, body in streams.feed(data):
            if conn == RUNTIME_CONN and type_ == RESPONSE:
                resp = ttrpc_pb2.Response.FromString(body)
                if resp.status.code:
                    say(f"register failed: {resp.status.message}")
                    return
                say("registered")
            elif conn == PLUGIN_CONN and type_ == REQUEST:
                req = ttrpc_pb2.Request.FromString(body)
                out = ttrpc_pb2.Response(payload=serve(req.method, req.payload, sabotage))
                sock.sendall(frame(PLUGIN_CONN, sid, RESPONSE, out.SerializeToString()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--name", default="e2e-probe")
    ap.add_argument("--idx", default="10")
    ap.add_argument(
        "--sabotage",
        action="store_true",
        help=f"remove the cgroup named by {REMOVE_CGROUP} at StartContainer",
    )
    args = ap.parse_args()
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(args.socket)
                say("connected")
                session(sock, args.name, args.idx, args.sabotage)
            say("disconnected")
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError | ConnectionRefusedError):
                say(f"connection error: {exc}")
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
