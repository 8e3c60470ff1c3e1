"""Stand-ins for a real node and runtime: what `nri-sla demo` and the tests run against.

Nothing here is used by `nri-sla run` or the OCI hook. It ships in the package because
`nri-sla demo` (the built-in runtime simulator with example pods) runs from an install.
"""
