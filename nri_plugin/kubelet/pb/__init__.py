"""Generated protobuf and gRPC modules (python -m nri_plugin.kubelet.protogen). Do not edit
by hand.

`deviceplugin_v1beta1_pb2(_grpc)`: the kubelet's device plugin API (package v1beta1:
Registration, DevicePlugin); `podresources_v1_pb2(_grpc)`: the PodResources API
(package v1: PodResourcesLister).
"""
