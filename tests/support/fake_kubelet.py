"""A fake kubelet, run as its own process: the kubelet side of the device plugin API
(Registration on <dir>/kubelet.sock, then calling the plugin back) and a PodResources
server, built from whichever generated stubs it is given: this project's
(nri_plugin.kubelet.pb) or ones compiled from the kubelet's published protos. On Register
it dials the plugin, asks GetDevicePluginOptions and keeps a ListAndWatch stream open;
GetPreferredAllocation and Allocate are sent on command. Its own process because both
sets of stubs define the same protobuf names (v1beta1.*, v1.*), which one process's
descriptor pool cannot hold twice.

    python fake_kubelet.py --stubs-path DIR --deviceplugin MOD --podresources MOD
                           --plugin-dir DIR [--podresources-socket PATH]

MOD is the *_pb2 module; its *_pb2_grpc sibling is imported too. The test drives it with
one JSON object per line on stdin and reads one JSON answer per line on stdout
(tests/support/kubelet_harness.py). Messages travel as protobuf JSON with the proto field
names, which both sets of stubs share.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import queue
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
from google.protobuf import json_format

KUBELET_SOCKET = "kubelet.sock"


def as_dict(message) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


class Kubelet:
    def __init__(
        self, dp, dp_grpc, pr, pr_grpc, plugin_dir: Path, podresources_socket: str | None
    ) -> None:
        self.dp, self.dp_grpc, self.pr, self.pr_grpc = dp, dp_grpc, pr, pr_grpc
        self.plugin_dir = plugin_dir
        self.podresources_socket = podresources_socket
        self.registrations: queue.Queue = queue.Queue()
        self.lists: queue.Queue = queue.Queue()
        self.plugin = None  # (channel, DevicePluginStub) of the last registered plugin
        self.plugins: dict = {}  # resource name -> (channel, stub) of its plugin
        self.connected = threading.Event()  # set once the registered plugin is dialled
        self.options = None
        self.server = None
        self.pods = None  # a ListPodResourcesResponse
        self.get_unimplemented = False
        self.get_disabled = False  # the KubeletPodResourcesGet gate off (1.27 to 1.33)

    # -- the kubelet's servers ---------------------------------------------------------
    def start(self) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        registration = self

        class Registration(self.dp_grpc.RegistrationServicer):
            def Register(self, request, context):
                return registration.register(request, context)

        self.dp_grpc.add_RegistrationServicer_to_server(Registration(), self.server)
        self.server.add_insecure_port(f"unix://{self.plugin_dir / KUBELET_SOCKET}")
        if self.podresources_socket:
            self.pods = self.pr.ListPodResourcesResponse()

            class Lister(self.pr_grpc.PodResourcesListerServicer):
                def List(self, request, context):
                    return registration.pods

                def Get(self, request, context):
                    if registration.get_unimplemented:
                        context.abort(grpc.StatusCode.UNIMPLEMENTED, "method Get not implemented")
                    if registration.get_disabled:  # the kubelet's plain error: UNKNOWN
                        context.abort(
                            grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled"
                        )
                    for pod in registration.pods.pod_resources:
                        if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                            return registration.pr.GetPodResourcesResponse(pod_resources=pod)
                    # what the kubelet answers for a pod it does not know
                    context.abort(
                        grpc.StatusCode.UNKNOWN,
                        f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
                    )

            self.pr_grpc.add_PodResourcesListerServicer_to_server(Lister(), self.server)
            self.server.add_insecure_port(f"unix://{self.podresources_socket}")
        self.server.start()

    def stop(self) -> None:
        self.connected.clear()
        for channel, _ in self.plugins.values():
            channel.close()
        self.plugins.clear()
        self.plugin = None
        if self.server is not None:
            self.server.stop(grace=None).wait()
            self.server = None

    def restart(self) -> None:
        """A kubelet restart: its servers go, and its device manager wipes every socket in
        the device-plugin directory before serving kubelet.sock again."""
        self.stop()
        for entry in self.plugin_dir.iterdir():
            if entry.is_socket():
                entry.unlink()
        self.start()

    def register(self, request, context):
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.UNKNOWN, f"unsupported API version {request.version}")
        if "/" not in request.resource_name:
            context.abort(grpc.StatusCode.UNKNOWN, f"invalid resource name {request.resource_name}")
        # when it came, on the clock every process of this host shares (CLOCK_MONOTONIC)
        self.registrations.put((as_dict(request), time.monotonic()))
        # The device manager dials the plugin once Register has returned.
        threading.Thread(
            target=self.run_endpoint, args=(request.endpoint, request.resource_name), daemon=True
        ).start()
        return self.dp.Empty()

    def run_endpoint(self, endpoint: str, resource: str) -> None:
        channel = grpc.insecure_channel(f"unix://{self.plugin_dir / endpoint}")
        stub = self.dp_grpc.DevicePluginStub(channel)
        old = self.plugins.get(resource)
        if old is not None:
            old[0].close()
        self.plugin = self.plugins[resource] = (channel, stub)
        self.connected.set()
        try:
            self.options = as_dict(stub.GetDevicePluginOptions(self.dp.Empty(), timeout=10))
            for answer in stub.ListAndWatch(self.dp.Empty()):
                self.lists.put({**as_dict(answer), "resource": resource, "at": time.monotonic()})
        except grpc.RpcError as exc:
            self.lists.put({"stream_ended": exc.code().name, "resource": resource})

    # -- commands from the test ----------------------------------------------------------
    def command(self, cmd: dict) -> dict:
        op = cmd["op"]
        if op == "registration":
            request, at = self.registrations.get(timeout=cmd.get("timeout", 10))
            return {"request": request, "at": at}
        if op == "options":
            return {"options": self.options}
        if op == "next_list":
            return {"list": self.lists.get(timeout=cmd.get("timeout", 10))}
        if op == "call":
            method = cmd["method"]
            request_type = {
                "GetPreferredAllocation": self.dp.PreferredAllocationRequest,
                "Allocate": self.dp.AllocateRequest,
                "PreStartContainer": self.dp.PreStartContainerRequest,
                "GetDevicePluginOptions": self.dp.Empty,
            }[method]
            request = json_format.ParseDict(cmd.get("request", {}), request_type())
            if not self.connected.wait(cmd.get("timeout", 10)):
                raise queue.Empty
            plugin = self.plugins[cmd["resource"]] if cmd.get("resource") else self.plugin
            try:
                return {"response": as_dict(getattr(plugin[1], method)(request, timeout=10))}
            except grpc.RpcError as exc:
                return {"code": exc.code().name, "details": exc.details()}
        if op == "restart":
            self.restart()
            return {}
        if op == "set_pods":
            self.pods = json_format.ParseDict(
                {"pod_resources": cmd["pods"]}, self.pr.ListPodResourcesResponse()
            )
            self.get_unimplemented = cmd.get("get_unimplemented", False)
            self.get_disabled = cmd.get("get_disabled", False)
            return {}
        raise ValueError(f"unknown op {op!r}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stubs-path", default=None)
    parser.add_argument("--deviceplugin", required=True)
    parser.add_argument("--podresources", required=True)
    parser.add_argument("--plugin-dir", type=Path, required=True)
    parser.add_argument("--podresources-socket", default=None)
    args = parser.parse_args()
    if args.stubs_path:
        sys.path.insert(0, args.stubs_path)
    mods = [
        importlib.import_module(m)
        for name in (args.deviceplugin, args.podresources)
        for m in (name, name + "_grpc")
    ]
    kubelet = Kubelet(
        *mods, plugin_dir=args.plugin_dir, podresources_socket=args.podresources_socket
    )
    kubelet.start()
    print(
        json.dumps(
            {
                "ready": True,
                "pid": os.getpid(),
                "files": sorted({m.DESCRIPTOR.name for m in mods[::2]}),
                "allocate_fields": sorted(
                    f.name for f in mods[0].ContainerAllocateResponse.DESCRIPTOR.fields
                ),
            }
        ),
        flush=True,
    )
    for line in sys.stdin:
        try:
            answer = kubelet.command(json.loads(line))
        except queue.Empty:
            answer = {"error": "timed out"}
        except Exception as exc:  # reported to the test, which fails with it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)
    kubelet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
