"""LoRA fine-tuning on the tiny reference model and a tiny RLDS dataset: training, checkpoints, bad input."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("tensorflow_datasets")

from helpers.finetune_cfg import make_cfg  # noqa: E402
from helpers.rlds_fixture import DATASET, NO_ACTION_SPEC  # noqa: E402

from prismatic_tr.models import ActionTokenizer, load_vla  # noqa: E402
from prismatic_tr.reducers import num_kept  # noqa: E402
from prismatic_tr.training import FinetuneConfig, TokenReductionConfig, action_metrics, finetune  # noqa: E402
from prismatic_tr.training.distributed import init_distributed  # noqa: E402
from prismatic_tr.training.loop import build_loader, optimizer_step, prepare, run  # noqa: E402
from prismatic_tr.vla import (  # noqa: E402
    Setting,
    apply_token_reduction_from_config,
    apply_token_reduction_to_vla,
    attach_token_reduction,
    get_token_reduction,
)
from prismatic_tr.vla.settings import DEFAULT_DEPTH_FRACTION, DEFAULT_METHODS  # noqa: E402
from vla_scripts.finetune import main  # noqa: E402

N_PATCHES = 256  # tiny preset: 224 px, patch 14


# --- metrics -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [256, 64, 1])
def test_metrics_slice_by_visual_token_count(k):
    tok = ActionTokenizer(1024)
    labels = torch.tensor([[-100, -100, 900, 1000, 1023, 2], [-100, -100, -100, 800, 801, 2]])
    logits = torch.zeros(2, labels.shape[1] + k, 1088)
    targets = labels[:, 1:]
    pos = torch.arange(targets.shape[1])
    for b in range(2):
        logits[b, k + pos, targets[b].clamp(min=0)] = 10.0  # perfect next-token predictions
    perfect = action_metrics(logits, labels, k, tok)
    assert perfect["action_accuracy"] == 1.0 and perfect["action_l1"] == 0.0
    logits[0, k + 1, 1000] = 20.0  # position predicting the 900 token now says 1000
    off = action_metrics(logits, labels, k, tok)
    assert math.isclose(off["action_accuracy"].item(), 4 / 5, rel_tol=1e-6)
    expected_l1 = abs(tok.decode_token_ids_to_actions(np.array([1000]))[0] - tok.decode_token_ids_to_actions(np.array([900]))[0]) / 5
    assert math.isclose(off["action_l1"].item(), expected_l1, rel_tol=1e-5)
    with pytest.raises(ValueError, match="visual tokens"):
        action_metrics(logits, labels, k + 1, tok)


LLM_REFUSED = r"site='llm' cannot be fine-tuned: the llm site prunes .* generation prefill only.*Fine-tune with site 'projector' or 'vision'"

# --- config validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batch_size": 0}, "batch_size=0"),
        ({"grad_accumulation_steps": 0}, "grad_accumulation_steps=0"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"use_quantization": True, "use_lora": False}, "needs use_lora=True"),
        ({"quantization_bits": 3}, "quantization_bits=3"),
        ({"lora_dropout": 1.0}, "lora_dropout"),
        ({"token_reduction": {"method": "no_such_method"}}, "no_such_method"),
        ({"token_reduction": {"method": "topk_magnitude", "keep_ratio": 1.5}}, "1.5"),
        ({"max_steps": 10, "stop_at_step": 11}, r"stop_at_step=11 is not allowed; use an integer in \[1, max_steps=10\]"),
        ({"stop_at_step": 0}, "stop_at_step=0"),
        ({"token_reduction": {"site": "bogus"}}, r"site='bogus' is not allowed; use one of"),
        ({"token_reduction": {"site": "vision", "depth_fraction": 1.0}}, r"depth_fraction=1.0 is not allowed; .* \(0, 1\)"),
        ({"token_reduction": {"site": "vision", "positions": "shifted"}}, r"positions='shifted' is not allowed at site 'vision'"),
        ({"token_reduction": {"site": "vision", "method": "spatial_pool"}}, "not allowed at site 'vision'"),
        ({"token_reduction": {"method": "topk_magnitude", "depth_fraction": 0.25}}, "goes with site 'vision' or 'llm'"),
        ({"token_reduction": {"site": "llm"}}, LLM_REFUSED),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    """Bad values, the llm site included, fail in ``__post_init__``, naming the value and what is allowed."""
    with pytest.raises(ValueError, match=match):
        FinetuneConfig(**kwargs)


def test_reduction_config_defaults_to_none():
    assert not TokenReductionConfig().enabled and TokenReductionConfig().settings() is None
    assert TokenReductionConfig(method="none").method is None
    assert not TokenReductionConfig(site="vision", method="none").enabled


def test_reduction_config_takes_the_sites_defaults_and_names_the_run():
    """A site without a method takes the site's default method (read from prismatic_tr.vla.settings) and depth;
    the run name says site, method, depth and positions."""
    vision = TokenReductionConfig(site="vision", keep_ratio=0.25)
    assert (vision.method, vision.depth_fraction) == (DEFAULT_METHODS["vision"], DEFAULT_DEPTH_FRACTION)
    assert vision.settings() == Setting.for_site("vision", keep_ratio=0.25)
    assert TokenReductionConfig(method="spatial_pool").site == "projector"
    assert TokenReductionConfig(site="projector").method == DEFAULT_METHODS["projector"]
    cfg = FinetuneConfig(token_reduction={"site": "vision", "method": "norm", "depth_fraction": 0.5,
                                          "keep_ratio": 0.25, "positions": "compact"})
    assert cfg.exp_id().endswith("+tr-vision-norm-d0.5-compact-0.25")
    assert FinetuneConfig(token_reduction={"method": "random", "keep_ratio": 0.5}).exp_id().endswith("+tr-random-0.5")


# --- bad input through the script: clear message, exit status 2, before any training ----------------

BAD_CLI = [
    (["--dataset_name", "missing_ds"], "dataset directory .*missing_ds not found"),
    (["--split", "test"], "split 'test' not in dataset"),
    (["--dataset_name", NO_ACTION_SPEC.dataset_name], "lack action"),
    (["--use_quantization", "true", "--use_lora", "false"], "needs use_lora=True"),
    (["--token_reduction.method", "bogus"], "bogus"),
    (["--token_reduction.site", "llm"], LLM_REFUSED),
    (["--token_reduction.site", "bogus"], "site='bogus' is not allowed"),
    (["--token_reduction.site", "vision", "--token_reduction.depth_fraction", "0"], "depth_fraction=0.0 is not allowed"),
    (["--token_reduction.site", "vision", "--token_reduction.positions", "shifted"], "positions='shifted'"),
    (["--batch_size", "49"], "batch_size=49 does not fit: the split has 48 steps"),
    (["--batch_size", "0"], "batch_size=0"),
    (["--vla_path", "/nonexistent/dir"], "vla_path='/nonexistent/dir' does not exist"),
    (["--vla_path", "{root}"], "is not a checkpoint directory"),
]


@pytest.mark.parametrize("extra, match", BAD_CLI)
def test_cli_rejects_bad_input(paths, tmp_path, capsys, extra, match):
    root, vla_dir = paths
    args = ["--vla_path", str(vla_dir), "--data_root_dir", str(root), "--dataset_name", DATASET,
            "--run_root_dir", str(tmp_path / "runs"), "--batch_size", "2", "--max_steps", "1"]
    assert main(args + [a.format(root=root) for a in extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("finetune.py: error: ") and re.search(match, err), err
    assert not (tmp_path / "runs").exists()  # nothing was written: it failed before training


# --- training -----------------------------------------------------------------------------------------

REDUCTIONS = {"none": {}, "projector": {"method": "topk_magnitude", "keep_ratio": 0.25},
              "vision": {"site": "vision", "depth_fraction": 0.25, "keep_ratio": 0.25}}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_loss_falls_on_a_repeated_batch(paths, tmp_path, name):
    cfg = make_cfg(paths, tmp_path, token_reduction=REDUCTIONS[name])
    s = prepare(cfg, init_distributed())
    batch = next(iter(build_loader(cfg, s.plan, s.vla, s.processor, s.info, seed=0)))
    with torch.no_grad():
        k = s.model(**{key: batch[key] for key in ("input_ids", "attention_mask", "pixel_values")}).projector_features.shape[1]
    assert k == (num_kept(N_PATCHES, 0.25) if REDUCTIONS[name] else N_PATCHES)
    losses = [float(optimizer_step(s.model, itertools.repeat(batch), s.optimizer, 1, s.info.device,
                                   s.action_tokenizer)["loss"]) for _ in range(5)]
    print(f"repeated-batch losses ({name}): {[round(x, 4) for x in losses]}")
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.05 and all(b < a for a, b in zip(losses, losses[1:], strict=False))


@pytest.mark.parametrize("use_lora", [False, True])
def test_frozen_vision_backbone_keeps_the_towers(paths, tmp_path, use_lora):
    cfg = make_cfg(paths, tmp_path, use_lora=use_lora, freeze_vision_backbone=True)
    assert "frozen-vision" in cfg.exp_id()
    s = prepare(cfg, init_distributed())
    towers = {n: p.detach().clone() for n, p in s.vla.vision_backbone.named_parameters()}
    rest = {n: p.detach().clone() for n, p in s.vla.named_parameters() if p.requires_grad}
    assert towers and rest and not any(p.requires_grad for p in s.vla.vision_backbone.parameters())
    batch = next(iter(build_loader(cfg, s.plan, s.vla, s.processor, s.info, seed=0)))
    for _ in range(2):
        optimizer_step(s.model, itertools.repeat(batch), s.optimizer, 1, s.info.device, s.action_tokenizer)
    assert all(torch.equal(p, towers[n]) for n, p in s.vla.vision_backbone.named_parameters())
    after = dict(s.vla.named_parameters())
    assert any(not torch.equal(after[n], v) for n, v in rest.items())  # the projector / LLM did train


def test_checkpoint_reloads_with_reduction_and_resumes(paths, tmp_path):
    cfg = make_cfg(paths, tmp_path, max_steps=2, save_steps=1, save_latest_checkpoint_only=False,
                   token_reduction={"method": "topk_magnitude", "keep_ratio": 0.25})
    result = finetune(cfg)
    assert [r["step"] for r in result.history] == [1.0, 2.0]
    assert all(math.isfinite(r["loss"]) and 0 <= r["action_accuracy"] <= 1 for r in result.history)
    ckpt = result.last_checkpoint
    assert ckpt.name == "step_000002" and (ckpt.parent / "step_000001").is_dir()
    for name in ("config.json", "model.safetensors", "dataset_statistics.json", "tokenizer.json", "adapter"):
        assert (ckpt / name).exists(), name

    vla, processor = load_vla(ckpt)
    assert vla.config.token_reduction["method"] == "topk_magnitude"
    assert DATASET in vla.norm_stats and vla.norm_stats[DATASET]["action"]["mask"][-1] is False
    handle = apply_token_reduction_from_config(vla)
    assert handle is not None and get_token_reduction(vla) is handle
    img = np.zeros((32, 32, 3), np.uint8)
    inputs = processor("In: What action should the robot take to open the drawer?\nOut:", img)
    with torch.no_grad():
        out = vla(**inputs)
    assert out.projector_features.shape[1] == num_kept(N_PATCHES, 0.25)
    action = vla.predict_action(**inputs, unnorm_key=DATASET)
    stats = vla.norm_stats[DATASET]["action"]
    assert action.shape == (7,) and np.isfinite(action).all()
    assert (action[:6] >= np.array(stats["q01"][:6]) - 1e-6).all() and (action[:6] <= np.array(stats["q99"][:6]) + 1e-6).all()

    # The merged weights equal base + adapter (merge done on a fresh CPU copy).
    from peft import PeftModel

    base, _ = load_vla(cfg.vla_path)
    apply_token_reduction_to_vla(base, method="topk_magnitude", reduction_ratio=0.25)
    peft_model = PeftModel.from_pretrained(base, str(ckpt / "adapter")).eval()
    with torch.no_grad():
        torch.testing.assert_close(peft_model(**inputs).logits, out.logits, atol=1e-4, rtol=1e-4)

    resumed = finetune(make_cfg(paths, tmp_path, max_steps=2, resume_from=ckpt.parent / "step_000001",
                                token_reduction={"method": "topk_magnitude", "keep_ratio": 0.25}))
    assert resumed.start_step == 1 and [r["step"] for r in resumed.history] == [2.0]


@pytest.mark.parametrize("use_lora", [True, False])
def test_vision_site_checkpoint_reloads_as_the_trained_policy(paths, tmp_path, use_lora):
    """Fine-tune with the vision site, reload the checkpoint (``load_vla`` + ``apply_token_reduction_from_config``):
    the same setting (site, method, depth, positions) and the trained model's logits, fp32-tight."""
    cfg = make_cfg(paths, tmp_path, max_steps=2, use_lora=use_lora,
                   token_reduction={"site": "vision", "depth_fraction": 0.5, "keep_ratio": 0.25})
    assert f"+tr-vision-{DEFAULT_METHODS['vision']}-d0.5-0.25" in cfg.exp_id()
    s = prepare(cfg, init_distributed())
    result = run(s)
    vla, processor = load_vla(result.last_checkpoint)
    assert vla.config.token_reduction == cfg.token_reduction.settings().to_dict()
    handle = apply_token_reduction_from_config(vla)
    assert handle.settings == cfg.token_reduction.settings() and handle.settings.positions == "original"
    assert handle.cut == get_token_reduction(s.vla).cut  # the same blocks on the same towers

    img = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    inputs = processor("In: What action should the robot take to open the drawer?\nOut:", img)
    s.model.eval()
    with torch.no_grad():
        trained, reloaded = s.model(**inputs), vla(**inputs)
    assert reloaded.projector_features.shape[1] == num_kept(N_PATCHES, 0.25)
    torch.testing.assert_close(reloaded.logits, trained.logits, atol=1e-5, rtol=1e-5)
    base, _ = load_vla(cfg.vla_path)
    attach_token_reduction(base, cfg.token_reduction.settings())
    with torch.no_grad():  # training did change the weights: the untrained model differs under the same setting
        assert (base(**inputs).logits[:, -1] - trained.logits[:, -1]).abs().max() > 1e-3


def test_stop_at_step_stops_the_run_with_the_schedule_kept(paths, tmp_path):
    """``stop_at_step`` runs the first steps of the full schedule exactly: same learning rates, same weights as the
    full run's checkpoint at that step, which is saved and logged though no interval falls on it."""
    common = dict(max_steps=5, lr_schedule="cosine", lr_warmup_steps=1, use_lora=False, save_latest_checkpoint_only=False)
    full = finetune(make_cfg(paths, tmp_path / "full", save_steps=3, **common))
    stopped = finetune(make_cfg(paths, tmp_path / "stopped", stop_at_step=3, log_every=2, **common))
    assert [r["step"] for r in stopped.history] == [1.0, 2.0, 3.0] and stopped.last_checkpoint.name == "step_000003"
    assert [r["lr"] for r in stopped.history] == [r["lr"] for r in full.history[:3]]
    # step 3: a quarter into the cosine over 5 - 1 steps (over 3 steps it would be half-way: 0.55 of the rate)
    assert stopped.history[2]["lr"] == pytest.approx(5e-3 * (0.1 + 0.45 * (1 + math.cos(math.pi / 4))))
    step3 = full.run_dir / "checkpoints" / "step_000003" / "model.safetensors"
    assert (stopped.last_checkpoint / "model.safetensors").read_bytes() == step3.read_bytes()


def _bnb_cpu_8bit_reason() -> str | None:
    """None if bitsandbytes runs an 8-bit Linear on this CPU, else why not."""
    try:
        import bitsandbytes as bnb

        lin = bnb.nn.Linear8bitLt(8, 8, has_fp16_weights=False)
        lin.weight = bnb.nn.Int8Params(torch.randn(8, 8).half(), requires_grad=False, has_fp16_weights=False)
        lin.to("cpu")(torch.randn(2, 8))
    except Exception as exc:  # ImportError, or no CPU kernel in this bitsandbytes
        return f"bitsandbytes 8-bit does not run on this CPU: {type(exc).__name__}: {exc}"
    return None


def test_quantized_8bit_lora_trains(paths, tmp_path):
    reason = _bnb_cpu_8bit_reason()
    if reason:
        pytest.skip(reason)
    import bitsandbytes as bnb

    cfg = make_cfg(paths, tmp_path, use_quantization=True, quantization_bits=8)
    s = prepare(cfg, init_distributed())
    assert any(isinstance(m, bnb.nn.Linear8bitLt) for m in s.vla.modules())
    assert all(type(m).__name__ != "Linear8bitLt" for n, m in s.vla.named_modules() if n.startswith("projector"))
    batch = next(iter(build_loader(cfg, s.plan, s.vla, s.processor, s.info, seed=0)))
    losses = [float(optimizer_step(s.model, itertools.repeat(batch), s.optimizer, 1, s.info.device,
                                   s.action_tokenizer)["loss"]) for _ in range(3)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]


def test_4bit_on_cpu_with_odd_layer_sizes_is_refused(paths, tmp_path):
    pytest.importorskip("bitsandbytes")
    cfg = make_cfg(paths, tmp_path, use_quantization=True, quantization_bits=4)
    with pytest.raises(ValueError, match="multiple of 32"):
        prepare(cfg, init_distributed())
