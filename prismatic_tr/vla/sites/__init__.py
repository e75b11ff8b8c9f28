"""One room per site: where visual tokens leave an OpenVLA model, and (``base``) where their positions are decided.

* ``projector``: between the vision backbone and the projector (:class:`ProjectorSiteHandle`);
* ``vision``: inside both vision towers (:class:`VisionSiteHandle`);
* ``llm``: inside the language model, in a generation prefill (:class:`LLMSiteHandle`).

The first two share the backbone's slot and hand on the kept tokens' positions (``base.BackboneSlotHandle``);
the llm site keeps the position ids the language model gave every token.
"""

from prismatic_tr.vla.sites.base import BackboneSlotHandle, SiteHandle
from prismatic_tr.vla.sites.llm import LLMSiteHandle, llm_layer
from prismatic_tr.vla.sites.projector import ProjectorSiteHandle, ReductionHandle
from prismatic_tr.vla.sites.vision import VisionSiteHandle

HANDLES: dict[str, type[SiteHandle]] = {
    "projector": ProjectorSiteHandle,
    "vision": VisionSiteHandle,
    "llm": LLMSiteHandle,
}

__all__ = [
    "HANDLES",
    "BackboneSlotHandle",
    "LLMSiteHandle",
    "ProjectorSiteHandle",
    "ReductionHandle",
    "SiteHandle",
    "VisionSiteHandle",
    "llm_layer",
]
