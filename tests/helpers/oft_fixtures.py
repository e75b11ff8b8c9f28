"""Small OpenVLA-OFT-style artefacts for tests: demonstrations with both cameras, a random-weight OpenVLA-style base
(preset tiny) and an OFT policy made from it with the demonstrations' statistics."""

from __future__ import annotations

from pathlib import Path

from prismatic_tr.data.oft import OFTChunkSource, oft_statistics
from prismatic_tr.envs.demos import DemoConfig, make_demos
from prismatic_tr.models import build_processor, build_vla, load_vla
from prismatic_tr.models.oft_config import OFTSettings
from prismatic_tr.policy.oft_policy import oft_from_openvla
from prismatic_tr.policy.oft_recipe import DATASET

SETTINGS = OFTSettings(num_images_in_input=2, num_actions_chunk=8, action_dim=7, proprio_dim=4)
DEMO_SEEDS = (40, 41, 42)


def write_oft_demos(root: Path) -> Path:
    make_demos(DemoConfig(num_episodes=len(DEMO_SEEDS), seed=DEMO_SEEDS[0], output_dir=root, dataset_name=DATASET,
                          min_objects=1, max_objects=3, third_person=True, progress=False))
    return root


def write_tiny_base(out: Path) -> Path:
    """A random-weight OpenVLA-style checkpoint (preset tiny) with the task's processor."""
    vla = build_vla("tiny", seed=0)
    vla.save_pretrained(out)
    build_processor(vla.config, task_words=True).save_pretrained(out)
    return out


def write_tiny_oft(demos: Path, base: Path, out: Path) -> Path:
    """A saved random-weight OFT policy (preset tiny) with the demonstrations' statistics."""
    openvla, processor = load_vla(base)
    vla = oft_from_openvla(openvla, SETTINGS, seed=1)
    vla.norm_stats = vla.config.norm_stats = oft_statistics(OFTChunkSource(demos, DATASET), DATASET)
    vla.save_pretrained(out)
    processor.save_pretrained(out)
    return out
