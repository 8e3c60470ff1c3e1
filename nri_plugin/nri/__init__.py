"""NRI transport: mux + ttrpc framing (sans-IO), generated protobuf modules, the plugin
stub (asyncio edge) and the long-running service.

Modules: `mux`, `ttrpc`, `core` (sans-IO); `connection`, `stub`, `service` (asyncio);
`pb` (generated); `protogen` (regenerates `pb`). The runtime side used by tests,
benchmarks and the demo lives in nri_plugin.simulated.runtime.
Nothing here imports protobuf at package import time, so `python -m
nri_plugin.nri.protogen` works even when the generated modules are missing or broken.
"""
