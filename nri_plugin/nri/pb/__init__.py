"""Generated protobuf modules (python -m nri_plugin.nri.protogen). Do not edit by hand.

`nri_pb2` holds the NRI API (package nri.pkg.api.v1alpha1), `ttrpc_pb2` the ttrpc
envelope (Request, Response, Status, KeyValue).
"""
