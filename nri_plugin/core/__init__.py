"""The one decide/apply core both front-ends (the NRI plugin and the OCI hook) call.

annotations -> SLA (nri_plugin.sla) -> plan (nri_plugin.plan) -> cgroup writes and RT
room (nri_plugin.enforce). `decide(node, ContainerRequest)` gives one frozen `Decision`
per container on a `Node` (config, cgroup version, capabilities): the hook's one-shot
`OneShotNode` keeps no books, the plugin's `NodeState` holds what outlives a container
(cgroup facts, allocator, RT budget, CPU pool, records); `nri_plugin.ops.event` renders
the decision event both front-ends log. What differs between the front-ends is only how
the plan reaches the kernel: the plugin answers with an NRI adjustment and writes the rest
at StartContainer, the hook writes everything itself. The package imports nothing: the
hook's cold path imports the modules it needs.
"""
