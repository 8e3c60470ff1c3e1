"""The kubelet's gRPC APIs as nri-sla uses them: the PodResources client (which devices the
kubelet granted to each container) and the device plugin server (`nri-sla device-plugin`).
"""
