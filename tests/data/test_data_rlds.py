"""RLDS reading, statistics, examples and collation on tiny datasets written by tensorflow-datasets."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("tensorflow_datasets")

from helpers.rlds_fixture import DATASET, NO_ACTION_SPEC, OXE_SPEC, SPEC, rlds_root  # noqa: E402

from prismatic_tr.data import (  # noqa: E402
    ActionPromptTransform,
    ImageAugmentation,
    PaddedCollator,
    RLDSIterableDataset,
    RLDSSource,
    compute_dataset_statistics,
    load_dataset_statistics,
    save_dataset_statistics,
)
from prismatic_tr.data.synthetic import INSTRUCTIONS, _episode  # noqa: E402
from prismatic_tr.models import (  # noqa: E402  # noqa: E402
    IGNORE_INDEX,
    ActionTokenizer,
    build_processor,
    build_prompt,
    make_config,  # noqa: E402
    normalize_actions,
)


@pytest.fixture(scope="session")
def root(tmp_path_factory: pytest.TempPathFactory):
    return rlds_root(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def processor():
    return build_processor(make_config("tiny"))


def _all_actions(spec) -> np.ndarray:
    return np.stack([s["action"] for ep in range(spec.num_episodes) for s in _episode(spec, 0, ep)["steps"]])


@pytest.mark.parametrize(
    "spec, image_key, text_key",
    [
        (SPEC, "observation/image", "language_instruction"),
        (OXE_SPEC, "observation/image_primary", "observation/natural_language_instruction"),
    ],
)
def test_source_finds_keys_and_reads_steps(root, spec, image_key, text_key):
    src = RLDSSource(root, spec.dataset_name, "train")
    assert (src.keys.image, src.keys.instruction, src.keys.action) == (image_key, text_key, "action")
    steps = list(RLDSIterableDataset(src, lambda s: s, train=False, shuffle_buffer_size=1))
    written = [(ep, st) for ep in range(spec.num_episodes) for st in _episode(spec, 0, ep)["steps"]]
    assert len(steps) == len(written) == spec.num_episodes * spec.steps_per_episode
    by_action = {np.asarray(st["action"]).tobytes(): (ep, st) for ep, st in written}  # tfds reorders episodes
    for step in steps:
        ep, ref = by_action[np.asarray(step["action"], dtype=np.float32).tobytes()]
        assert step["image"].dtype == np.uint8 and step["image"].shape == (spec.image_size,) * 2 + (3,)
        np.testing.assert_array_equal(step["image"], ref["observation"][image_key.split("/")[1]])
        assert step["instruction"].decode() == INSTRUCTIONS[ep % len(INSTRUCTIONS)]


@pytest.mark.parametrize(
    "name, split, match",
    [
        ("no_such_dataset", "train", "dataset directory .*no_such_dataset not found"),
        (DATASET, "test", "split 'test' not in dataset .*splits: \\['train', 'val'\\]"),
        (NO_ACTION_SPEC.dataset_name, "train", "lack action .*step keys found: \\['language_instruction', 'observation/image'\\]"),
    ],
)
def test_source_rejects_bad_input(root, name, split, match):
    with pytest.raises(ValueError, match=match):
        RLDSSource(root, name, split)


def test_statistics_match_numpy_and_roundtrip(root, tmp_path):
    src = RLDSSource(root, DATASET, "train")
    stats = compute_dataset_statistics(DATASET, src.iter_actions(), src.num_episodes)
    ref = _all_actions(SPEC).astype(np.float64)
    entry = stats[DATASET]
    assert entry["num_transitions"] == len(ref) == 48 and entry["num_trajectories"] == 6
    np.testing.assert_allclose(entry["action"]["q01"], np.quantile(ref, 0.01, axis=0), rtol=1e-6)
    np.testing.assert_allclose(entry["action"]["q99"], np.quantile(ref, 0.99, axis=0), rtol=1e-6)
    np.testing.assert_allclose(entry["action"]["mean"], ref.mean(0), rtol=1e-6)
    assert entry["action"]["mask"] == [True] * 6 + [False]
    path = save_dataset_statistics(stats, tmp_path)
    assert path.name == "dataset_statistics.json" and load_dataset_statistics(tmp_path) == json.loads(path.read_text())


def test_example_labels_only_actions_and_eos(root, processor):
    src = RLDSSource(root, DATASET, "train")
    stats = compute_dataset_statistics(DATASET, src.iter_actions(), src.num_episodes)[DATASET]["action"]
    vocab = processor.tokenizer.vocab_size
    transform = ActionPromptTransform(processor, vocab, processor.tokenizer.eos_token_id, stats)
    step = next(iter(RLDSIterableDataset(src, lambda s: s, train=False, shuffle_buffer_size=1)))
    ex = transform(step)
    prompt_ids = processor.tokenizer(build_prompt(step["instruction"].decode())).input_ids
    n = len(prompt_ids)
    assert ex["input_ids"][:n].tolist() == prompt_ids and ex["input_ids"].shape[0] == n + 8
    assert (ex["labels"][:n] == IGNORE_INDEX).all() and (ex["labels"][n:] == ex["input_ids"][n:]).all()
    assert ex["input_ids"][-1] == processor.tokenizer.eos_token_id
    act_ids = ex["input_ids"][n:-1]
    assert ((act_ids >= vocab - 256) & (act_ids < vocab)).all()
    decoded = ActionTokenizer(vocab).decode_token_ids_to_actions(act_ids.numpy())
    np.testing.assert_allclose(decoded, normalize_actions(step["action"], stats), atol=2.0 / 255 + 1e-6)
    assert ex["pixel_values"].shape == (6, 224, 224)


def test_collator_pads_right_and_masks():
    ex = [
        {"pixel_values": torch.zeros(6, 4, 4), "input_ids": torch.tensor([1, 5, 6]), "labels": torch.tensor([-100, 5, 6])},
        {"pixel_values": torch.ones(6, 4, 4), "input_ids": torch.tensor([1, 7]), "labels": torch.tensor([-100, 7])},
    ]
    batch = PaddedCollator(pad_token_id=99)(ex)
    assert batch["input_ids"].tolist() == [[1, 5, 6], [1, 7, 99]]
    assert batch["labels"].tolist() == [[-100, 5, 6], [-100, 7, -100]]
    assert batch["attention_mask"].tolist() == [[True] * 3, [True, True, False]]
    assert batch["pixel_values"].shape == (2, 6, 4, 4)
    with pytest.raises(ValueError, match="empty"):
        PaddedCollator(pad_token_id=0)([])


def _actions_of(ds, n):
    it = iter(ds)
    return [tuple(np.round(next(it)["action"], 6)) for _ in range(n)]


def test_sharding_splits_steps_and_shuffle_is_seeded(root):
    src = RLDSSource(root, DATASET, "train")
    shards = [_actions_of(RLDSIterableDataset(src, lambda s: s, train=False, shuffle_buffer_size=1, rank=r,
                                              world_size=2), 24) for r in range(2)]
    everything = _actions_of(RLDSIterableDataset(src, lambda s: s, train=False, shuffle_buffer_size=1), 48)
    assert not set(shards[0]) & set(shards[1]) and sorted(shards[0] + shards[1]) == sorted(everything)
    a, b, c = (_actions_of(RLDSIterableDataset(src, lambda s: s, train=False, shuffle_buffer_size=48, seed=s), 48)
               for s in (1, 1, 2))
    assert a == b and a != c and sorted(a) == sorted(everything)


def test_image_augmentation_changes_pixels_keeps_size():
    from PIL import Image

    torch.manual_seed(0)
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8))
    out = ImageAugmentation()(img)
    assert out.size == img.size and not np.array_equal(np.asarray(out), np.asarray(img))
    with pytest.raises(ValueError, match="crop_scale"):
        ImageAugmentation(crop_scale=0.0)


@pytest.mark.parametrize("kwargs, match", [({"shuffle_buffer_size": 0}, "shuffle_buffer_size"), ({"rank": 2}, "rank=2")])
def test_dataset_rejects_bad_arguments(root, kwargs, match):
    with pytest.raises(ValueError, match=match):
        RLDSIterableDataset(RLDSSource(root, DATASET, "train"), lambda s: s, **kwargs)


def test_no_module_level_tensorflow_import():
    """tensorflow is imported only inside functions (after torch), never when a module is imported."""
    import ast
    from pathlib import Path

    import prismatic_tr.data
    import prismatic_tr.training

    for pkg in (prismatic_tr.data, prismatic_tr.training):
        for path in Path(pkg.__file__).parent.glob("*.py"):
            for node in ast.parse(path.read_text()).body:  # top-level statements only
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                assert not any(n.split(".")[0] in ("tensorflow", "tensorflow_datasets") for n in names), path
