"""OpenVLA's prompt, and a locally built Llama-like tokenizer for the random-weight presets. No downloads.

Tokenizer: byte-level BPE trained in-process (deterministically) on a small built-in corpus of robot
instructions, ids <unk>=0, <s>=1 (prepended as BOS), </s>=2, then the byte alphabet and merges, then filler
tokens ``<fill_i>`` up to ``vocab_size`` (so the last 256 ids, the action bins, never hold text), and <PAD>
as an added special token with id ``vocab_size`` (as OpenVLA adds <PAD> = 32000 to Llama-2's tokenizer).
Real checkpoints bring their own tokenizer files, loaded with ``AutoTokenizer``.
"""

from __future__ import annotations

import json

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

# follows OpenVLA c8f03f48 prismatic/vla/datasets/datasets.py RLDSBatchTransform with the PurePromptBuilder (MIT, see
# NOTICE): the prompt the released checkpoints were trained with.
PROMPT_TEMPLATE = "In: What action should the robot take to {instruction}?\nOut:"
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
MAX_TRAINED_VOCAB = 1024

_VERBS = [
    "pick up",
    "put",
    "move",
    "push",
    "open",
    "close",
    "place",
    "stack",
    "wipe",
    "turn",
    "lift",
    "slide",
]
_OBJECTS = [
    "the red block",
    "the blue cup",
    "the green sponge",
    "the spoon",
    "the carrot",
    "the drawer",
    "the pot",
    "the towel",
    "the eggplant",
    "the yellow bowl",
    "the cloth",
    "the microwave door",
]
# The bundled tabletop task's instructions ("pick up the red block", "move to the blue circle"; the words of
# prismatic_tr.envs.spec, checked by tests/models/test_models.py), added to the corpus with ``task_words=True`` (the
# policy recipe): each colour and shape word is then a whole token, as in Llama-2's tokenizer, so the policy
# reads the target from one position instead of spelling it out. Off by default: the other presets' token ids
# (and the recorded OpenVLA parity values) stay as they were.
_TASK_COLORS = ["red", "green", "blue", "yellow", "purple"]
_TASK_SHAPES = ["block", "circle", "triangle", "star", "cross"]
_TASK_TEMPLATES = ["pick up the {}", "move to the {}"]
_PLACES = ["on the plate", "into the sink", "to the left", "in the basket", "on the table", "off the stove"]


def build_prompt(instruction: str) -> str:
    """OpenVLA's prompt: ``In: What action should the robot take to {instruction}?\\nOut:``."""
    return PROMPT_TEMPLATE.format(instruction=instruction.strip().rstrip("?").lower())


def _corpus(task_words: bool = False) -> list[str]:
    """A fixed corpus of robot-instruction prompts (deterministic order); see ``_TASK_COLORS`` for task_words."""
    lines = [build_prompt(f"{v} {o} {p}") for v in _VERBS for o in _OBJECTS for p in _PLACES]
    if task_words:
        lines += [build_prompt(t.format(f"{c} {s}")) for t in _TASK_TEMPLATES for c in _TASK_COLORS
                  for s in _TASK_SHAPES for _ in range(8)]
    return lines + ["the robot arm gripper moves slowly and carefully 0 1 2 3 4 5 6 7 8 9 , . ! ?"]


def _trained_bpe(max_vocab: int, task_words: bool = False) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-level BPE on the corpus; returns its vocab and merges (format-independent)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    trainer = trainers.BpeTrainer(
        vocab_size=max_vocab,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(task_words), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return dict(model["vocab"]), merges  # type: ignore[return-value]


def build_tokenizer(vocab_size: int, n_action_bins: int = 256, task_words: bool = False) -> PreTrainedTokenizerFast:
    """Llama-like fast tokenizer with ``vocab_size`` base ids plus <PAD> (= ``vocab_size``); ``task_words``: the
    tabletop task's colour and shape words are whole tokens."""
    max_vocab = min(MAX_TRAINED_VOCAB, vocab_size - n_action_bins)
    if max_vocab < 512:
        raise ValueError(
            f"vocab_size={vocab_size} too small; need >= {512 + n_action_bins} for text + action bins"
        )
    vocab, merges = _trained_bpe(max_vocab, task_words)
    for i in range(len(vocab), vocab_size):
        vocab[f"<fill_{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)]
    )
    tok.add_special_tokens(SPECIAL_TOKENS + ["<PAD>"])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<PAD>",
        padding_side="right",
        model_max_length=2048,
    )
