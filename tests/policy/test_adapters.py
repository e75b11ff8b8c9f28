"""Adapters fitted to a reduction setting: install from a fine-tuning checkpoint, load on their base, ship."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("tensorflow_datasets")

from helpers.finetune_cfg import make_cfg  # noqa: E402

from prismatic_tr.models import load_vla  # noqa: E402
from prismatic_tr.policy import adapters  # noqa: E402
from prismatic_tr.policy.closed_loop import run_episodes  # noqa: E402
from prismatic_tr.training import finetune  # noqa: E402
from prismatic_tr.vla import apply_token_reduction_from_config, get_token_reduction, read_settings  # noqa: E402

VISION = {"site": "vision", "depth_fraction": 0.25, "keep_ratio": 0.25}


@pytest.fixture(scope="module")
def trained(paths, tmp_path_factory) -> Path:
    """A 2-step LoRA checkpoint of the tiny model trained under the vision site (learning rate high enough that
    the adapter moves the logits)."""
    tmp = tmp_path_factory.mktemp("adapter_run")
    result = finetune(make_cfg(paths, tmp, token_reduction=VISION, max_steps=2, learning_rate=5e-2,
                               distill_weight=1.0))
    return result.last_checkpoint


def _logits(vla: torch.nn.Module) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 500, (2, 8), generator=g)
    ids[:, 0] = 1
    px = torch.randn(2, 6, 224, 224, generator=g)
    with torch.no_grad():
        return vla.eval()(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=px).logits


def test_installed_adapter_loads_as_the_trained_policy(paths, trained, tmp_path):
    """install -> load_adapted_policy on the base = the checkpoint's merged model with its setting attached
    (float16 adapter weights: logits to 1e-3); without the setting when asked; the record names its base."""
    _, vla_dir = paths
    dest = adapters.install_adapter(trained, tmp_path / "ad")
    assert sorted(p.name for p in dest.iterdir()) == sorted([*adapters.ADAPTER_FILES, adapters.SETTING_FILE,
                                                            adapters.RECORD_FILE])
    record = json.loads((dest / adapters.RECORD_FILE).read_text())
    assert record["base"] == str(vla_dir) and record["base_sha256"] == adapters.sha256_of(vla_dir / "model.safetensors")
    vla, _ = adapters.load_adapted_policy(dest, base=vla_dir)
    reference, _ = load_vla(trained)
    apply_token_reduction_from_config(reference)
    assert read_settings(vla.config) == read_settings(reference.config) and get_token_reduction(vla).settings.site == "vision"
    got, want = _logits(vla), _logits(reference)
    base, _ = load_vla(vla_dir)
    torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
    plain, _ = adapters.load_adapted_policy(dest, base=vla_dir, apply_reduction=False)
    assert get_token_reduction(plain) is None
    assert getattr(plain.config, "token_reduction", None) is None and read_settings(plain.config) == []
    assert "token_reduction" not in plain.config.to_dict() or plain.config.to_dict()["token_reduction"] is None
    assert (_logits(plain) - _logits(base)).abs().max() > 1e-3  # the adapter did change the policy


def test_adapter_refuses_another_base_and_bad_names(paths, trained, tmp_path):
    _, vla_dir = paths
    dest = adapters.install_adapter(trained, tmp_path / "ad")
    other = tmp_path / "other_base"
    shutil.copytree(vla_dir, other)
    state = load_vla(other)[0].state_dict()
    from safetensors.torch import save_file

    save_file({k: v + 1e-3 if v.is_floating_point() else v for k, v in state.items()}, str(other / "model.safetensors"))
    recorded, found = adapters.base_sha256(vla_dir), adapters.base_sha256(other)
    with pytest.raises(ValueError, match=f"weights sha256 {recorded}.*has sha256 {found}.*allow_other_base=True"):
        adapters.load_adapted_policy(dest, base=other)
    with pytest.raises(ValueError, match="'no-such-adapter' is not a shipped adapter"):
        adapters.load_adapted_policy("no-such-adapter")
    unreduced = finetune(make_cfg(paths, tmp_path / "plain", max_steps=1)).last_checkpoint
    with pytest.raises(ValueError, match="token_reduction"):
        adapters.install_adapter(unreduced, tmp_path / "nope")
    assert adapters.main(["install", str(unreduced), str(tmp_path / "nope")]) == 2


METAWORLD = "metaworld_mt10"   # a MetaWorld policy's adapter names this benchmark in its record
SHIPPED = {name: adapters.read_adapter(name)[1].get("benchmark") == METAWORLD for name in adapters.shipped_adapters()}


@pytest.mark.parametrize("name", [n for n, mw in SHIPPED.items() if not mw] or ["(none shipped)"])
def test_shipped_adapter_acts_under_its_setting(name):
    """Every tabletop adapter in prismatic_tr/assets/adapters loads on the bundled policy of its kind (OpenVLA- or
    OFT-style) with its setting attached, carries
    its record (validation curve, test result, training time), and solves most of 20 validation episodes."""
    if name == "(none shipped)":
        pytest.skip("no adapter is shipped in prismatic_tr/assets/adapters")
    from prismatic_tr.envs.splits import VALIDATION, split_seeds
    from prismatic_tr.policy.bundled import OFT_UNNORM_KEY, UNNORM_KEY

    setting, record = adapters.read_adapter(name)
    key = OFT_UNNORM_KEY if record.get("policy") == "openvla-oft" else UNNORM_KEY  # an OFT policy's adapter
    assert record["validation"] and record["test"]["split"] == "test" and "training_wall" in record
    vla, processor = adapters.load_adapted_policy(name)
    handle = get_token_reduction(vla)
    assert handle is not None and handle.settings.site == setting["site"]
    stored = setting.get("keep_ratio", setting.get("reduction_ratio"))  # the key of the version that wrote the file
    assert stored is not None and handle.settings.keep_ratio == stored
    outcomes = run_episodes(vla.eval(), processor, list(split_seeds(VALIDATION, 20)), key, batch_size=20)
    assert sum(o.success for o in outcomes) >= 15, [o.outcome for o in outcomes]


@pytest.mark.parametrize("name", [n for n, mw in SHIPPED.items() if mw] or ["(none shipped)"])
def test_shipped_metaworld_adapter_is_its_recipes_choice_and_acts_under_its_setting(name):
    """Every MetaWorld adapter loads on the shipped MetaWorld policy by default (the weights its record names), with
    its setting attached, ships its recipe's record (the checkpoint chosen on validation and tested on 50 episodes a
    task: the closed-loop evidence, and the slow one-command test runs the recipe end to end), and gives a finite
    chunk that the adapter changed (the policy without it, under the same setting, gives another)."""
    if name == "(none shipped)":
        pytest.skip("no MetaWorld adapter is shipped in prismatic_tr/assets/adapters")
    import numpy as np

    from prismatic_tr.bench.vla.job import sample_inputs
    from prismatic_tr.envs.metaworld.tasks import STATE_DIM
    from prismatic_tr.policy.bundled import bundled_metaworld_policy_dir
    from prismatic_tr.vla import apply_token_reduction_spec

    setting, record = adapters.read_adapter(name)
    evaluation = json.loads((adapters.adapter_dir(name) / "evaluation.json").read_text())
    assert evaluation["selection"]["split"] == "validation" and evaluation["checkpoint"] == record["source_checkpoint"]
    assert evaluation["evaluation"]["test"]["episodes_per_task"] == 50 and evaluation["training"]["lora_rank"]
    assert adapters.default_base(name) == bundled_metaworld_policy_dir()
    vla, processor = adapters.load_adapted_policy(name)
    handle = get_token_reduction(vla)
    assert handle is not None and handle.settings.site == setting["site"] and handle.settings.label == evaluation["setting"]
    plain, _ = load_vla(bundled_metaworld_policy_dir())
    apply_token_reduction_spec(plain, evaluation["setting"])
    inputs = sample_inputs(processor, "open the window", 1, 224, 0, num_images=2, proprio_dim=STATE_DIM)
    with torch.no_grad():
        chunks = [np.asarray(m.predict_action(**inputs, unnorm_key=METAWORLD, do_sample=False)[0]) for m in (vla, plain)]
    assert chunks[0].reshape(-1, 7).shape == (8, 7) and np.isfinite(chunks[0]).all()
    assert not np.allclose(chunks[0], chunks[1], atol=1e-4)


def test_adapter_config_from_a_newer_peft_loads_unless_it_uses_what_this_peft_lacks(tmp_path):
    """Keys a newer peft writes (off, or bookkeeping) are dropped for the installed LoraConfig; a key that is on
    and unknown is refused by name."""
    base = {"peft_type": "LORA", "r": 4, "lora_alpha": 4, "target_modules": ["q_proj"], "lora_dropout": 0.0}
    newer = {**base, "alora_invocation_tokens": None, "use_newfangled": False, "peft_version": "99.0",
             "newfangled_config": {}}
    (tmp_path / "adapter_config.json").write_text(json.dumps(newer))
    config = adapters.lora_config(tmp_path)
    assert config.r == 4 and config.lora_alpha == 4 and set(config.target_modules) == {"q_proj"}
    (tmp_path / "adapter_config.json").write_text(json.dumps({**newer, "use_newfangled": True}))
    with pytest.raises(ValueError, match="uses \\['use_newfangled'\\]"):
        adapters.lora_config(tmp_path)


# --- the base check: sharded checkpoints, unrecorded adapters --------------------------------------------------

def _save_sharded(src: Path, dest: Path, shards: int, perturb: float) -> Path:
    """``src``'s checkpoint copied to ``dest`` with its weights (plus ``perturb``) in ``shards`` safetensors shards
    and an index, as ``save_pretrained(max_shard_size=...)`` writes them; no ``model.safetensors``."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("model.safetensors"))
    state = load_file(str(src / "model.safetensors"))
    keys = sorted(state)
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: state[k] + perturb if state[k].is_floating_point() else state[k] for k in keys[i::shards]}
        save_file(part, str(dest / name))
        weight_map.update(dict.fromkeys(part, name))
    (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dest


def test_sharded_base_is_checked_index_and_every_shard(paths, trained, tmp_path):
    """A base in 5 shards with other weights is refused (both hashes named; measured before: it loaded silently);
    an adapter installed on a sharded base records the index and every shard, so changing one shard is refused;
    ``allow_other_base=True`` loads it anyway; a missing shard is named."""
    _, vla_dir = paths
    dest = adapters.install_adapter(trained, tmp_path / "ad")
    other = _save_sharded(vla_dir, tmp_path / "sharded_other", 5, perturb=1e-3)
    assert load_vla(other)[0] is not None  # the native loader reads the shards
    recorded, found = adapters.base_sha256(vla_dir), adapters.base_sha256(other)
    assert recorded != found and [p.name for p in adapters.base_weight_files(other)][0].endswith(".index.json")
    with pytest.raises(ValueError, match=f"sha256 {recorded}.*has sha256 {found}.*allow_other_base=True"):
        adapters.load_adapted_policy(dest, base=other)
    vla, _ = adapters.load_adapted_policy(dest, base=other, allow_other_base=True)
    assert get_token_reduction(vla).settings.site == "vision"

    same = _save_sharded(vla_dir, tmp_path / "sharded_same", 5, perturb=0.0)
    on_shards = adapters.install_adapter(trained, tmp_path / "ad_shards", base=same)
    record = json.loads((on_shards / adapters.RECORD_FILE).read_text())
    assert record["base_sha256"] == adapters.base_sha256(same)
    adapters.load_adapted_policy(on_shards, base=same, apply_reduction=False)  # its own base: loads
    from safetensors.torch import load_file, save_file

    shard = same / "model-00003-of-00005.safetensors"
    state = load_file(str(shard))
    key = next(k for k, v in state.items() if v.is_floating_point())
    state[key] = state[key] + 1e-3
    save_file(state, str(shard))
    with pytest.raises(ValueError, match=f"has sha256 {adapters.base_sha256(same)}"):
        adapters.load_adapted_policy(on_shards, base=same)
    shard.unlink()
    with pytest.raises(ValueError, match="names shards that are missing: \\['model-00003-of-00005.safetensors'\\]"):
        adapters.load_adapted_policy(on_shards, base=same, allow_other_base=True)


@pytest.mark.parametrize("record", ["no base_sha256", "no record.json"])
def test_adapter_without_a_recorded_base_is_refused_unless_asked(paths, trained, tmp_path, record):
    _, vla_dir = paths
    dest = adapters.install_adapter(trained, tmp_path / "ad")
    if record == "no record.json":
        (dest / adapters.RECORD_FILE).unlink()
    else:
        data = json.loads((dest / adapters.RECORD_FILE).read_text())
        del data["base_sha256"]
        (dest / adapters.RECORD_FILE).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="records no base_sha256.*allow_other_base=True"):
        adapters.load_adapted_policy(dest, base=vla_dir)
    vla, _ = adapters.load_adapted_policy(dest, base=vla_dir, allow_other_base=True)
    assert get_token_reduction(vla) is not None
    with pytest.raises(ValueError, match="allow_other_base='yes' is not allowed"):
        adapters.load_adapted_policy(dest, base=vla_dir, allow_other_base="yes")


# --- install from anywhere; bad paths exit 2 with one line ------------------------------------------------------

def _relocated_run(trained: Path, vla_dir: Path, root: Path) -> Path:
    """The trained run copied under ``root/outputs/`` with its config.yaml's vla_path made relative to ``root``
    (where finetune_reduced.sh runs: ``--vla_path prismatic_tr/assets/tabletop_policy``), the base at ``root/base``."""
    import yaml

    run = trained.parents[1]
    shutil.copytree(run, root / "outputs" / run.name)
    shutil.copytree(vla_dir, root / "base")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["vla_path"] = "base"
    (root / "outputs" / run.name / "config.yaml").write_text(yaml.safe_dump(config))
    return root / "outputs" / run.name / trained.relative_to(run)


def test_install_resolves_relative_paths_from_any_directory(paths, trained, tmp_path, monkeypatch):
    """Relative checkpoint / dest / results paths are taken from the working directory, and a run's relative
    vla_path from the folder above the checkpoint that holds it; the record keeps absolute paths."""
    _, vla_dir = paths
    root = tmp_path / "repo"
    ckpt = _relocated_run(trained, vla_dir, root)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    rel = Path("..") / ckpt.relative_to(tmp_path)
    assert adapters.main(["install", str(rel), "ad"]) == 0
    record = json.loads((tmp_path / "elsewhere" / "ad" / adapters.RECORD_FILE).read_text())
    assert record["base"] == str((root / "base").resolve()) and record["source_checkpoint"] == str(ckpt.resolve())
    assert record["base_sha256"] == adapters.base_sha256(vla_dir)
    monkeypatch.chdir(ckpt)  # the checkpoint itself as "."
    assert adapters.main(["install", ".", str(tmp_path / "ad2")]) == 0
    shutil.rmtree(root / "base")
    with pytest.raises(ValueError, match="vla_path 'base' \\(config.yaml\\) is not a directory.*--base"):
        adapters.install_adapter(".", tmp_path / "ad3")
    assert adapters.main(["install", ".", str(tmp_path / "ad3"), "--base", str(vla_dir)]) == 0


@pytest.mark.parametrize("case", ["checkpoint", "results", "base", "dest is a file"])
def test_install_bad_path_exits_2_with_one_line(trained, tmp_path, monkeypatch, capsys, case):
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("x")
    argv = {"checkpoint": ["install", "no/such/ckpt", "ad"],
            "results": ["install", str(trained), "ad", "--results", "no_such_results"],
            "base": ["install", str(trained), "ad", "--base", "no_such_base"],
            "dest is a file": ["install", str(trained), "afile"]}[case]
    assert adapters.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m prismatic_tr.policy.adapters: error: "), err
    assert {"checkpoint": "'no/such/ckpt' is not a directory", "results": "'no_such_results' is not a directory",
            "base": "'no_such_base' is not a directory", "dest is a file": "is a file"}[case] in err[0]
    assert not Path("ad").exists()  # nothing written


@pytest.mark.slow
def test_install_command_bad_path_no_traceback(tmp_path):
    """The module as a command, from another directory: exit 2, one line on stderr, no traceback."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "prismatic_tr.policy.adapters", "install", "missing", "ad"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("python -m prismatic_tr.policy.adapters: error: checkpoint 'missing' is not a "
                                   f"directory (resolved to {str(tmp_path.resolve() / 'missing')!r})")
