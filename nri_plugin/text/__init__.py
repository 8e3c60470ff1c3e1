"""The hardened text readers every input goes through: the YAML reader (`safeyaml`) and
Kubernetes quantities and durations (`quantities`), shared by the SLA annotations, the
node config and manifests.

Empty on purpose: the OCI hook passes through this package on a cold run.
"""
