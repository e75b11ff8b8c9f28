"""Inside a transformers Llama: visual-token pruning during the prefill (the llm site: pure scoring in
``pruning``, hooks in ``patch``), the position rule of reduced sequences (``positions``) and the hooks that keep
it (``rope``), and reading what each call into the language model is (``calls``)."""

from prismatic_tr.llm.calls import LlamaCall, announce_prefill, announced_prefill, read_call
from prismatic_tr.llm.patch import LLMPruningConfig, LLMPruningHandle, apply_llm_pruning
from prismatic_tr.llm.positions import original_positions
from prismatic_tr.llm.pruning import (
    prune_index,
    query_index,
    select_visual,
    visual_token_scores,
    visual_window,
)
from prismatic_tr.llm.rope import PositionRemap

__all__ = [
    "LLMPruningConfig",
    "LLMPruningHandle",
    "LlamaCall",
    "PositionRemap",
    "announce_prefill",
    "announced_prefill",
    "apply_llm_pruning",
    "original_positions",
    "prune_index",
    "query_index",
    "read_call",
    "select_visual",
    "visual_token_scores",
    "visual_window",
]
