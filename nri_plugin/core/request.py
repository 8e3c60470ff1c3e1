"""ContainerRequest: everything the core's `decide` needs to know about one container.

Both front-ends build one: the plugin from a CreateContainer request (pod, container,
the runtime's grant, the kubelet's books), the OCI hook from the bundle's config.json.
"""

from __future__ import annotations

from collections.abc import Mapping

from nri_plugin.granted import GrantedResources
from nri_plugin.value import Frozen, field


class ContainerRequest(Frozen):
    """One container asking to be decided.

    `annotations`: the pod's (hostile tenant input; only nri-sla's keys are read);
    `name`: the container's name in the pod; `namespace`: the pod's namespace ("" when
    unknown: only what the node config allows every namespace is granted); `owner`: the
    container's id (what its allocations are held under); `pod`: the pod's id, for the
    per-pod caps ("" counts the container alone); `nri_version`: the runtime's NRI
    version (None: the hook, no NRI); `granted`: what the runtime set for the container
    (its limits, GPU grant evidence); `kubelet_gpu_ids`: the GPU device ids the kubelet's
    PodResources reports for it, more grant evidence.
    """

    annotations: Mapping[str, str]
    name: str
    namespace: str = ""
    owner: str = ""
    pod: str = ""
    nri_version: str | None = None
    granted: GrantedResources = field(default_factory=GrantedResources)
    kubelet_gpu_ids: tuple[str, ...] = ()
