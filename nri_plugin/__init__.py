"""nri-sla: pod resource SLAs enforced through containerd's NRI and OCI hooks."""

__version__ = "0.1.0"
