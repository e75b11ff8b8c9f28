"""Visual-token pruning inside the language model (the LLM site): pure scoring in ``pruning``, hooks in ``patch``."""

from prismatic_tr.llm.patch import LLMPruningConfig, LLMPruningHandle, apply_llm_pruning
from prismatic_tr.llm.pruning import prune_index, select_visual, visual_start, visual_token_scores

__all__ = [
    "LLMPruningConfig",
    "LLMPruningHandle",
    "apply_llm_pruning",
    "prune_index",
    "select_visual",
    "visual_start",
    "visual_token_scores",
]
