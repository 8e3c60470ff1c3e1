"""The simulated kubelet's PodResources API v1 on a unix socket: List, Get and
GetAllocatableResources answered from its books (kubelet.py), over the project's own
generated stubs, so that `PodResourcesClient` (and the NRI plugin through it) talks to it
as to a real kubelet.

A grpcio server with its own threads, not an asyncio one: the plugin asks PodResources
with blocking calls from its event loop, which in the tests and the demo is the loop the
simulated runtime runs on; a server on that loop could never answer.
"""

from __future__ import annotations

import contextlib
import os
from concurrent import futures

import grpc

from nri_plugin.kubelet.pb import podresources_v1_pb2 as pr
from nri_plugin.kubelet.pb import podresources_v1_pb2_grpc as pr_grpc
from nri_plugin.simulated.kubelet import Kubelet

STOP_GRACE = 1.0  # s a call in flight may still take when the server stops


class _Lister(pr_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet

    def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        return pr.ListPodResourcesResponse(pod_resources=self.kubelet.pod_resources())

    def Get(
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        for pod in self.kubelet.pod_resources():
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return pr.GetPodResourcesResponse(pod_resources=pod)
        # The kubelet returns a plain error for a pod it does not know, which gRPC sends
        # as UNKNOWN with this text.
        context.abort(
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )

    def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        return pr.AllocatableResourcesResponse(devices=self.kubelet.allocatable())


class PodResourcesServer:
    """Serves `kubelet`'s books on `socket_path` between start() and stop() (or as a
    context manager); the socket file is removed on stop."""

    def __init__(self, kubelet: Kubelet, socket_path: str) -> None:
        self.kubelet = kubelet
        self.socket_path = socket_path
        self._server: grpc.Server | None = None

    def start(self) -> PodResourcesServer:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pr_grpc.add_PodResourcesListerServicer_to_server(_Lister(self.kubelet), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            # A grace, even with no call in flight, makes the goodbye to connected clients
            # a graceful GOAWAY; without one grpc's C core logs the cancelled connection
            # on stderr, into `nri-sla demo`'s table.
            self._server.stop(grace=STOP_GRACE).wait()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    def __enter__(self) -> PodResourcesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
