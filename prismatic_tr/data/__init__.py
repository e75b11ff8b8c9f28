"""RLDS data for fine-tuning: reading (tensorflow-datasets, imported lazily), statistics, examples, collation.

Nothing here imports tensorflow at module import time; it is imported inside functions, after torch.
"""

from prismatic_tr.data.collator import PaddedCollator
from prismatic_tr.data.dataset import RLDSIterableDataset
from prismatic_tr.data.rlds import RLDSSource, StepKeys, find_version_dir, resolve_step_keys
from prismatic_tr.data.statistics import (
    STATS_FILENAME,
    action_statistics,
    compute_dataset_statistics,
    load_dataset_statistics,
    save_dataset_statistics,
)
from prismatic_tr.data.synthetic import SyntheticRLDSSpec, write_synthetic_rlds
from prismatic_tr.data.transforms import (
    PROMPT_TEMPLATE,
    ActionPromptTransform,
    ImageAugmentation,
    build_prompt,
)
from prismatic_tr.data.writer import write_tfds_dataset

__all__ = [
    "PROMPT_TEMPLATE",
    "STATS_FILENAME",
    "ActionPromptTransform",
    "ImageAugmentation",
    "PaddedCollator",
    "RLDSIterableDataset",
    "RLDSSource",
    "StepKeys",
    "SyntheticRLDSSpec",
    "action_statistics",
    "build_prompt",
    "compute_dataset_statistics",
    "find_version_dir",
    "load_dataset_statistics",
    "resolve_step_keys",
    "save_dataset_statistics",
    "write_synthetic_rlds",
    "write_tfds_dataset",
]
