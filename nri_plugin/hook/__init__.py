"""The OCI hook fallback: the SLA enforced by the OCI runtime's hook at container creation.

Runs where NRI is unavailable (containerd without NRI, CRI-O, podman) or the plugin is
down. It parses the same annotations, plans with the same planner and writes the same
cgroup settings as the plugin, directly in cgroupfs, then reads them back.

This package's __init__ imports nothing on purpose: `python3 -I -m nri_plugin.hook` is
exec'd for every container and must start fast (no protobuf, no NVML, no argparse).
"""
