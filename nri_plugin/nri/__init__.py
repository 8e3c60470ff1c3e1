"""NRI transport: mux + ttrpc framing (sans-IO), generated protobuf modules, the plugin
stub (asyncio edge), the long-running service and a runtime-side simulator.

Modules: `mux`, `ttrpc`, `core` (sans-IO); `connection`, `stub`, `service` (asyncio);
`simulator` (tests, benchmarks, demo); `pb` (generated); `protogen` (regenerates `pb`).
Nothing here imports protobuf at package import time, so `python -m
nri_plugin.nri.protogen` works even when the generated modules are missing or broken.
"""
