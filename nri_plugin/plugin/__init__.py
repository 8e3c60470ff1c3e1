"""The NRI front-end: SlaPlugin's handlers run the core for each container event and
answer in NRI's terms (the ContainerAdjustment builder lives here, with protobuf);
`service` assembles what `nri-sla run` serves around them."""

from nri_plugin.plugin.errors import StartRefused
from nri_plugin.plugin.handlers import SlaPlugin

__all__ = ["SlaPlugin", "StartRefused"]
