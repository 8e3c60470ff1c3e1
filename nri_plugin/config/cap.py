"""`Cap`, a per-pod cap as the node config gives it: its own module so that the converters
(`convert`) can build one and the sections (`values`) can hold one."""

from __future__ import annotations

from nri_plugin.value import Frozen


class Cap(Frozen):
    """A per-pod cap: a count, or a percentage of what the node has."""

    value: float
    percent: bool = False

    def of(self, node_total: int) -> int:
        """The cap as a count on a node with `node_total` of the resource."""
        if self.percent:
            return int(node_total * self.value // 100)
        return int(self.value)

    def __str__(self) -> str:
        number = f"{self.value:g}"
        return f"{number}%" if self.percent else number
