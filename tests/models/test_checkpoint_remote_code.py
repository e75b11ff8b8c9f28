"""Checkpoints written from a base keep loading the ways the base loads (issue 28).

A base with OpenVLA's remote code (laid out like ``openvla/openvla-7b``: ``*.py`` files, ``auto_map`` in config.json,
preprocessor_config.json and tokenizer_config.json) hands both on to what this package writes from it
(:func:`carry_remote_code`, ``NativeOpenVLA.save_pretrained``, ``finetune.py``'s merged checkpoints), so OpenVLA's own
``AutoProcessor`` / ``AutoModelForVision2Seq(trust_remote_code=True)`` load them on its pins; a checkpoint from a
native-only base gets a README.md naming ``load_vla``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from prismatic_tr.models import NativeOpenVLA, build_prompt, build_vla, load_vla
from prismatic_tr.models.checkpoint import AUTO_MAP_FILES, LOADING_NOTE, auto_maps, carry_remote_code

PINS = "4.40.1"
MAPS = {
    "config.json": {"AutoConfig": "configuration_x.XConfig", "AutoModelForVision2Seq": "modeling_x.XModel"},
    "preprocessor_config.json": {"AutoImageProcessor": "processing_x.XImageProcessor",
                                 "AutoProcessor": "processing_x.XProcessor"},
    "tokenizer_config.json": {"AutoProcessor": "processing_x.XProcessor",
                              "AutoTokenizer": ["tokenization_x.XTokenizer", None]},
}
CODE = {  # modeling_x imports helpers_x relatively: it must travel too
    "configuration_x.py": "X = 1\n", "modeling_x.py": "from .configuration_x import X\nfrom .helpers_x import Y\n",
    "helpers_x.py": "Y = 2\n", "processing_x.py": "Z = 3\n", "tokenization_x.py": "T = 4\n",
}


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data))


def _checkpoint(directory: Path, maps: dict | None = None, code: dict | None = None) -> Path:
    """A directory with the JSON files of a checkpoint (auto_maps from ``maps``) and the ``code`` files."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in AUTO_MAP_FILES[:3]:
        _write_json(directory / name, {"field": name, **({"auto_map": maps[name]} if maps and name in maps else {})})
    for name, text in (code or {}).items():
        (directory / name).write_text(text)
    return directory


# --- carry_remote_code on small directories (both stacks) ---

def test_remote_code_and_auto_maps_are_carried_unchanged(tmp_path: Path) -> None:
    base = _checkpoint(tmp_path / "base", MAPS, {**CODE, "unrelated.py": "raise SystemExit\n"})
    out = _checkpoint(tmp_path / "out")
    carry_remote_code(None, out)  # a note of ours, stale once code is carried
    carry_remote_code(base, out)
    assert auto_maps(out) == MAPS
    assert {p.name for p in out.glob("*.py")} == set(CODE)
    assert all((out / name).read_text() == text for name, text in CODE.items())
    assert json.loads((out / "config.json").read_text())["field"] == "config.json"  # the rest is kept
    assert not (out / LOADING_NOTE).exists()
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    carry_remote_code(base, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize(("maps", "copied"), [
    ({"config.json": {"AutoConfig": "owner/repo--configuration_x.XConfig"}}, set()),  # code in another repository
    ({"tokenizer_config.json": ["tokenization_x.XTokenizer", None]}, {"tokenization_x.py"}),  # legacy list form
])
def test_other_auto_map_forms(tmp_path: Path, maps: dict, copied: set) -> None:
    base, out = _checkpoint(tmp_path / "base", maps, CODE), _checkpoint(tmp_path / "out")
    carry_remote_code(base, out)
    assert auto_maps(out) == maps and {p.name for p in out.glob("*.py")} == copied


@pytest.mark.parametrize("base", ["none", "no_auto_map"])
def test_native_only_base_gets_a_note_naming_load_vla(tmp_path: Path, base: str) -> None:
    src = None if base == "none" else _checkpoint(tmp_path / "base")
    out = _checkpoint(tmp_path / "out")
    assert carry_remote_code(src, out) == [out / LOADING_NOTE]
    assert "load_vla" in (out / LOADING_NOTE).read_text() and not auto_maps(out)
    (out / LOADING_NOTE).write_text("a model card of someone else\n")
    carry_remote_code(src, out)
    assert (out / LOADING_NOTE).read_text() == "a model card of someone else\n"


@pytest.mark.parametrize(("case", "match"), [
    ("missing_module", "modeling_x.py"),
    ("missing_relative_import", "helpers_x.py"),
    ("base_not_a_directory", "base="),
    ("out_not_a_directory", "out="),
    ("bad_json", "config.json"),
])
def test_bad_input_is_a_value_error_naming_it(tmp_path: Path, case: str, match: str) -> None:
    code = {k: v for k, v in CODE.items() if not (
        (case == "missing_module" and k == "modeling_x.py") or (case == "missing_relative_import" and k == "helpers_x.py"))}
    base, out = _checkpoint(tmp_path / "base", MAPS, code), _checkpoint(tmp_path / "out")
    if case == "base_not_a_directory":
        base = tmp_path / "nowhere"
    if case == "out_not_a_directory":
        out = tmp_path / "nowhere"
    if case == "bad_json":
        (base / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=match):
        carry_remote_code(base, out)


# --- NativeOpenVLA.save_pretrained ---

def test_native_save_carries_the_code_it_was_loaded_with(tmp_path: Path) -> None:
    build_vla("tiny", seed=0).save_pretrained(tmp_path / "preset")
    assert "load_vla" in (tmp_path / "preset" / LOADING_NOTE).read_text()  # a preset has no remote code
    base = tmp_path / "preset"
    for name, text in CODE.items():
        (base / name).write_text(text)
    cfg = json.loads((base / "config.json").read_text())
    _write_json(base / "config.json", {**cfg, "auto_map": MAPS["config.json"]})
    vla, _ = load_vla(base)
    assert isinstance(vla, NativeOpenVLA) and vla.remote_code_dir == str(base)
    vla.save_pretrained(tmp_path / "copy")
    assert auto_maps(tmp_path / "copy") == {"config.json": MAPS["config.json"]}
    assert {p.name for p in (tmp_path / "copy").glob("*.py")} == {"configuration_x.py", "modeling_x.py", "helpers_x.py"}
    assert not (tmp_path / "copy" / LOADING_NOTE).exists()
    reloaded, _ = load_vla(tmp_path / "copy")  # auto_map does not stop native loading
    assert isinstance(reloaded, NativeOpenVLA)


# --- finetune.py on a checkpoint laid out like openvla/openvla-7b ---

@pytest.fixture(scope="module")
def finetuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real-layout checkpoint (written by OpenVLA's own code on the pins, natively elsewhere, plus OpenVLA's remote
    code and openvla-7b's auto_maps), LoRA-fine-tuned 2 steps with projector top-k 0.5 attached; its merged
    checkpoint."""
    pytest.importorskip("peft")
    pytest.importorskip("tensorflow_datasets")
    import transformers
    from helpers.openvla_checkpoint import add_remote_code, write_native_checkpoint, write_upstream_checkpoint
    from helpers.rlds_fixture import DATASET, rlds_root

    from vla_scripts.finetune import main as finetune_main

    tmp = tmp_path_factory.mktemp("remote_code")
    writer = write_upstream_checkpoint if transformers.__version__ == PINS else write_native_checkpoint
    base = add_remote_code(writer(tmp / "openvla_7b_layout"))
    status = finetune_main([
        "--vla_path", str(base), "--data_root_dir", str(rlds_root(tmp_path_factory.getbasetemp())),
        "--dataset_name", DATASET, "--run_root_dir", str(tmp / "runs"), "--batch_size", "2", "--max_steps", "2",
        "--save_steps", "2", "--lora_rank", "4", "--shuffle_buffer_size", "8", "--progress_bar", "false",
        "--token_reduction.method", "topk_magnitude", "--token_reduction.keep_ratio", "0.5",
    ])
    assert status == 0
    return next((tmp / "runs").glob("*/checkpoints/latest"))


def test_checkpoint_of_a_native_only_base_names_load_vla(paths: tuple, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    from helpers.rlds_fixture import DATASET

    from vla_scripts.finetune import main as finetune_main

    root, base = paths
    assert finetune_main(["--vla_path", str(base), "--data_root_dir", str(root), "--dataset_name", DATASET,
                          "--run_root_dir", str(tmp_path / "runs"), "--batch_size", "2", "--max_steps", "1",
                          "--save_steps", "1", "--lora_rank", "4", "--shuffle_buffer_size", "8",
                          "--progress_bar", "false"]) == 0
    ckpt = next((tmp_path / "runs").glob("*/checkpoints/latest"))
    assert "load_vla" in (ckpt / LOADING_NOTE).read_text() and not auto_maps(ckpt) and not list(ckpt.glob("*.py"))


def _inputs(processor, image_seed: int = 0) -> dict[str, torch.Tensor]:
    # only the model's inputs: the tests' tokenizer also returns token_type_ids, which OpenVLA's generate refuses
    inputs = processor(build_prompt("pick up the red block"), Image.fromarray(_image(image_seed)))
    return {k: inputs[k] for k in ("input_ids", "attention_mask", "pixel_values")}


def _image(seed: int) -> np.ndarray:
    from helpers.openvla_checkpoint import sample_image

    return sample_image(seed)


def test_merged_checkpoint_carries_openvla_remote_code(finetuned: Path) -> None:
    from helpers.openvla_checkpoint import OPENVLA_7B_AUTO_MAPS, REMOTE_CODE_FILES
    from helpers.reference_clients import require_reference

    code = require_reference("openvla_hf")
    assert auto_maps(finetuned) == OPENVLA_7B_AUTO_MAPS
    for name in REMOTE_CODE_FILES:
        assert (finetuned / name).read_bytes() == (code / name).read_bytes(), name
    assert not (finetuned / LOADING_NOTE).exists()


def test_merged_checkpoint_loads_with_load_vla(finetuned: Path) -> None:
    """Runs on every stack (on the newest one the remote code itself cannot run: ENVIRONMENT.md)."""
    from helpers.rlds_fixture import DATASET

    from prismatic_tr.vla import apply_token_reduction_from_config

    vla, processor = load_vla(finetuned)
    assert isinstance(vla, NativeOpenVLA) and vla.remote_code_dir == str(finetuned)
    handle = apply_token_reduction_from_config(vla)
    assert handle is not None and handle.settings.method == "topk_magnitude" and handle.reduced_num_patches() == 128
    inputs = _inputs(processor)
    with torch.no_grad():
        assert vla(**inputs).projector_features.shape[1] == 128
    assert np.isfinite(vla.predict_action(**inputs, unnorm_key=DATASET)).all()


def test_merged_checkpoint_loads_with_openvla_auto_classes(finetuned: Path) -> None:
    """OpenVLA's own loading path (its deploy.py and evaluation scripts): AutoProcessor and AutoModelForVision2Seq
    with trust_remote_code, on its pins. The tiny towers need timm overrides OpenVLA's code does not read."""
    import transformers

    if transformers.__version__ != PINS:
        pytest.skip(f"OpenVLA's remote code runs on its pins (transformers {PINS}), not {transformers.__version__}")
    from helpers.reference_clients import tiny_timm_towers
    from helpers.rlds_fixture import DATASET

    from prismatic_tr.vla import apply_token_reduction_from_config

    processor = transformers.AutoProcessor.from_pretrained(str(finetuned), trust_remote_code=True)
    with tiny_timm_towers():
        vla = transformers.AutoModelForVision2Seq.from_pretrained(str(finetuned), trust_remote_code=True,
                                                                  torch_dtype=torch.float32).eval()
    assert type(processor).__name__ == "PrismaticProcessor" and type(vla).__name__ == "OpenVLAForActionPrediction"
    handle = apply_token_reduction_from_config(vla)
    assert handle is not None and handle.settings.method == "topk_magnitude" and handle.reduced_num_patches() == 128
    inputs = _inputs(processor)
    with torch.no_grad():
        assert vla(**inputs).projector_features.shape[1] == 128
    action = vla.predict_action(**inputs, unnorm_key=DATASET, do_sample=False)
    assert action.shape == (7,) and np.isfinite(action).all()
    native, native_processor = load_vla(finetuned)
    apply_token_reduction_from_config(native)
    assert np.allclose(native.predict_action(**_inputs(native_processor), unnorm_key=DATASET), action, atol=1e-5)
