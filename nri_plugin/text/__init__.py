"""The hardened text readers every input goes through: the YAML reader (`safeyaml`),
Kubernetes quantities and durations (`quantities`) and the field-problem helpers
(`fields`), shared by the SLA annotations, the node config and manifests.

Empty on purpose: the OCI hook passes through this package on a cold run.
"""
