"""The one decide/apply core both front-ends (the NRI plugin and the OCI hook) call.

annotations -> SLA (nri_plugin.sla) -> plan (nri_plugin.plan) -> cgroup writes and RT
room (nri_plugin.enforce). `decide(node, ContainerRequest)` gives one frozen `Decision`
per container; `NodeState` holds what outlives a container (config, cgroup facts,
capabilities, allocator, RT budget); `core.event` renders the decision event both
front-ends log. What differs between the front-ends is only how the plan reaches the
kernel: the plugin answers with an NRI adjustment and writes the rest at StartContainer,
the hook writes everything itself.
"""

# Re-exports resolved on first use (PEP 562): the OCI hook's cached run imports
# core.event alone on every container start and must not pay for the parser and planner.
_EXPORTS = {
    "decision": ("Decision", "decide"),
    "nodestate": ("NodeState", "build_node", "node_allocator"),
    "request": ("ContainerRequest",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = sorted(_WHERE)  # resolved by __getattr__
