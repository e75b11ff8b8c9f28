"""Adapters fitted to a reduction setting: install from a fine-tuning checkpoint, load on their base, ship."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("tensorflow_datasets")

from test_finetune import make_cfg  # noqa: E402

from prismatic_tr.models import load_vla  # noqa: E402
from prismatic_tr.policy import adapters  # noqa: E402
from prismatic_tr.policy.closed_loop import run_episodes  # noqa: E402
from prismatic_tr.training import finetune  # noqa: E402
from prismatic_tr.vla import apply_token_reduction_from_config, get_token_reduction, read_settings  # noqa: E402

VISION = {"site": "vision", "depth_fraction": 0.25, "reduction_ratio": 0.25}


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
    assert (_logits(plain) - _logits(base)).abs().max() > 1e-3  # the adapter did change the policy


def test_adapter_refuses_another_base_and_bad_names(paths, trained, tmp_path):
    _, vla_dir = paths
    dest = adapters.install_adapter(trained, tmp_path / "ad")
    other = tmp_path / "other_base"
    shutil.copytree(vla_dir, other)
    state = load_vla(other)[0].state_dict()
    from safetensors.torch import save_file

    save_file({k: v + 1e-3 if v.is_floating_point() else v for k, v in state.items()}, str(other / "model.safetensors"))
    with pytest.raises(ValueError, match="was trained on a base policy with model.safetensors sha256"):
        adapters.load_adapted_policy(dest, base=other)
    with pytest.raises(ValueError, match="'no-such-adapter' is not a shipped adapter"):
        adapters.load_adapted_policy("no-such-adapter")
    unreduced = finetune(make_cfg(paths, tmp_path / "plain", max_steps=1)).last_checkpoint
    with pytest.raises(ValueError, match="token_reduction"):
        adapters.install_adapter(unreduced, tmp_path / "nope")
    assert adapters.main(["install", str(unreduced), str(tmp_path / "nope")]) == 2


@pytest.mark.parametrize("name", adapters.shipped_adapters() or ["(none shipped)"])
def test_shipped_adapter_acts_under_its_setting(name):
    """Every adapter in prismatic_tr/assets/adapters loads on the bundled policy with its setting attached, carries
    its record (validation curve, test result, training time), and solves most of 20 validation episodes."""
    if name == "(none shipped)":
        pytest.skip("no adapter is shipped in prismatic_tr/assets/adapters")
    from prismatic_tr.envs.splits import VALIDATION, split_seeds
    from prismatic_tr.policy.bundled import UNNORM_KEY

    setting, record = adapters.read_adapter(name)
    assert record["validation"] and record["test"]["split"] == "test" and "training_wall" in record
    vla, processor = adapters.load_adapted_policy(name)
    handle = get_token_reduction(vla)
    assert handle is not None and handle.settings.site == setting["site"]
    assert handle.settings.reduction_ratio == setting["reduction_ratio"]
    outcomes = run_episodes(vla.eval(), processor, list(split_seeds(VALIDATION, 20)), UNNORM_KEY, batch_size=20)
    assert sum(o.success for o in outcomes) >= 15, [o.outcome for o in outcomes]


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
