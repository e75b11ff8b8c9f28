"""Native loading of OpenVLA checkpoints: key checks, dtypes, shards, memory, remote-code fallbacks, prompts
and host syncs of the native model's generation."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.openvla_checkpoint import sample_image, write_native_checkpoint
from helpers.reference_clients import require_reference
from PIL import Image
from safetensors.torch import load_file, save_file

from prismatic_tr.bench.measure.ops import find_host_syncs
from prismatic_tr.models import NativeOpenVLA, RemoteCodeError, build_prompt, build_vla, load_vla
from prismatic_tr.models.prompt import _device_prompt, prepare_prompt


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_native_checkpoint(tmp_path_factory.mktemp("openvla_ckpt"))


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_missing_and_unexpected_keys_are_listed(checkpoint: Path, tmp_path: Path) -> None:
    bad = _copy(checkpoint, tmp_path / "bad")
    weights = load_file(bad / "model.safetensors")
    del weights["projector.fc3.bias"]
    weights["projector.fc9.weight"] = torch.zeros(2)
    save_file(weights, bad / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing keys.*projector\.fc3\.bias.*unexpected keys.*projector\.fc9\.weight"):
        load_vla(bad)


def test_layerscale_keys_are_openvlas(checkpoint: Path) -> None:
    keys = load_file(checkpoint / "model.safetensors").keys()
    assert "vision_backbone.featurizer.blocks.0.ls1.scale_factor" in keys
    assert not any(k.endswith(".gamma") for k in keys)


def test_dtype_and_defaults(checkpoint: Path) -> None:
    vla, _ = load_vla(checkpoint)
    assert vla.dtype == torch.float32  # the checkpoint's torch_dtype
    bf16, _ = load_vla(checkpoint, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in bf16.parameters())
    rotary = [b for n, b in bf16.named_buffers() if n.endswith("inv_freq")]
    assert rotary and all(b.dtype == torch.float32 for b in rotary)  # as OpenVLA loaded with torch_dtype
    assert bf16.config.empty_token_id == 29871 and bf16.vocab_size == 32000


def test_sharded_save_round_trip(tmp_path: Path) -> None:
    vla = build_vla("tiny", seed=2)
    vla.save_pretrained(tmp_path, max_shard_bytes=200_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1 and not (tmp_path / "model.safetensors").exists()
    loaded, _ = load_vla(tmp_path)
    for (name, a), (_, b) in zip(vla.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_native_refuses_other_llms(checkpoint: Path, tmp_path: Path) -> None:
    other = _copy(checkpoint, tmp_path / "mistral")
    cfg = json.loads((other / "config.json").read_text())
    cfg["llm_backbone_id"] = "mistral-v0.1-7b-pure"
    (other / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="mistral.*only Llama-family"):
        load_vla(other, native=True)
    with pytest.raises(ValueError, match="native="):
        load_vla(other, native="yes")


def test_remote_code_path(checkpoint: Path, tmp_path: Path) -> None:
    """The remote-code route: works on OpenVLA's pins; elsewhere one line that names the way out."""
    code = require_reference("openvla_hf")
    ckpt = _copy(checkpoint, tmp_path / "with_code")
    for name in ("configuration_prismatic.py", "modeling_prismatic.py", "processing_prismatic.py"):
        shutil.copy(code / name, ckpt / name)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "configuration_prismatic.OpenVLAConfig",
                       "AutoModelForVision2Seq": "modeling_prismatic.OpenVLAForActionPrediction"}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    import transformers

    if transformers.__version__ == "4.40.1":
        pytest.skip("the remote code runs on the pins; its tiny towers need timm overrides it does not read")
    with pytest.raises(RemoteCodeError) as err:
        load_vla(ckpt, native=False)
    message = str(err.value)
    assert "\n" not in message and "native=True" in message and "STACK=openvla" in message
    vla, _ = load_vla(ckpt)  # auto: native, no remote code involved
    assert isinstance(vla, NativeOpenVLA)


@pytest.mark.slow
def test_loading_keeps_one_copy_in_memory(tmp_path: Path) -> None:
    """Loading holds one copy of the weights: an fp32 file loaded as bf16 (every tensor read and converted)
    grows the process's anonymous memory by about half the file at its peak, not by the file or more."""
    from prismatic_tr.models import NativeOpenVLA, NativeOpenVLAConfig
    from prismatic_tr.models.config import make_config

    cfg = make_config("tiny").to_dict()
    cfg["text_config"].update(hidden_size=1024, intermediate_size=2816, num_attention_heads=8, num_key_value_heads=8,
                              num_hidden_layers=6)
    for key in ("model_type", "transformers_version"):
        cfg.pop(key, None)
    NativeOpenVLA(NativeOpenVLAConfig(**cfg)).save_pretrained(tmp_path)
    size_mb = (tmp_path / "model.safetensors").stat().st_size / 2**20
    script = textwrap.dedent(f"""
        import torch
        from prismatic_tr.models import NativeOpenVLA, checkpoint
        def anon_mb():  # anonymous resident memory: what copies of the weights cost (file pages are cache)
            return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon:")) / 1024
        before, peak, assign = anon_mb(), [0.0], checkpoint._assign
        def watched(*args):
            assign(*args)
            peak[0] = max(peak[0], anon_mb())
        checkpoint._assign = watched
        vla = NativeOpenVLA.from_pretrained({str(tmp_path)!r}, torch_dtype=torch.bfloat16)
        assert all(p.dtype == torch.bfloat16 for p in vla.parameters())
        print(peak[0] - before)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    grew_mb = float(out.stdout.strip().splitlines()[-1])
    assert size_mb > 150 and 0.4 * size_mb < grew_mb < 0.75 * size_mb, (grew_mb, size_mb)


# --- prompts: OpenVLA's empty-token rule, host and device paths ---

E, PAD = 7, 99


@pytest.mark.parametrize("rows, side", [([[1, 5, 6], [1, 5, E]], "right"), ([[1, 5, 6, 8], [1, 6]], "left"),
                                        ([[1, 2, 3], [1, 4, 5]], "right")])
def test_prompt_appends_empty_token_only_where_missing(rows: list[list[int]], side: str) -> None:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        sl = slice(0, len(r)) if side == "right" else slice(width - len(r), width)
        ids[i, sl], mask[i, sl] = torch.tensor(r), 1
    expected = [r if r[-1] == E else r + [E] for r in rows]
    for prompt in (prepare_prompt(ids, mask, E, PAD), _device_prompt(ids, mask, E)):
        keys = prompt.key_mask if prompt.key_mask is not None else torch.ones_like(prompt.ids, dtype=torch.bool)
        got = [prompt.ids[i][keys[i]].tolist() for i in range(len(rows))]
        assert got == expected
        assert all(keys[i, : len(r)].all() for i, r in enumerate(expected))  # real tokens first (BOS at 0)
    host = prepare_prompt(ids, mask, E, PAD)
    assert (host.key_mask is None) == (len({len(r) for r in expected}) == 1)


def test_prompt_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="no real token"):
        prepare_prompt(torch.ones(2, 3, dtype=torch.long), torch.tensor([[1, 1, 1], [0, 0, 0]]), None, PAD)
    with pytest.raises(ValueError, match="must match"):
        prepare_prompt(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 4), None, PAD)


# --- host syncs of the native model's own inference ---



@pytest.fixture(scope="module")
def native(checkpoint: Path) -> tuple[NativeOpenVLA, dict]:
    vla, processor = load_vla(checkpoint)
    return vla, dict(processor(build_prompt("pick up the red block"), Image.fromarray(sample_image())))


def test_predict_action_and_generate_do_not_sync(native: tuple[NativeOpenVLA, dict]) -> None:
    vla, inputs = native
    actions: list[np.ndarray] = []
    syncs = find_host_syncs(lambda: vla.generate(inputs["input_ids"], inputs["pixel_values"],
                                                 attention_mask=inputs["attention_mask"], max_new_tokens=7))
    assert syncs == {}
    # predict_action: only the final copy of the action tokens to the host (a no-op copy on the CPU)
    syncs = find_host_syncs(lambda: actions.append(vla.predict_action(**inputs, unnorm_key="bridge_orig")))
    assert syncs == {} and actions[0].shape == (7,)


def test_padded_batch_has_no_host_sync_on_either_stack(native: tuple[NativeOpenVLA, dict]) -> None:
    """A padded batch: the prefill runs unmasked (real tokens first), the decode steps get their mask from a
    layer hook, and transformers is never handed a mask it would read on the host (4.40 reads 2-D and 4-D ones)."""
    vla, inputs = native
    ids = torch.cat([inputs["input_ids"], inputs["input_ids"]])
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0
    px = torch.cat([inputs["pixel_values"]] * 2)
    assert find_host_syncs(lambda: vla.generate(ids, px, attention_mask=mask, max_new_tokens=3)) == {}


@pytest.mark.parametrize("padded", [False, True])
def test_device_prompt_path_has_no_host_sync_and_acts_the_same(native: tuple[NativeOpenVLA, dict], monkeypatch,
                                                               padded: bool) -> None:
    """The path GPU tensors take (static shapes, the key mask always kept), forced on the CPU: 0 host syncs on both
    stacks, and the same actions as the host path."""
    import prismatic_tr.models.prompt as prompt_module

    vla, inputs = native
    ids = torch.cat([inputs["input_ids"], inputs["input_ids"]])
    mask = torch.ones_like(ids)
    if padded:
        mask[1, -4:] = 0
    px = torch.cat([inputs["pixel_values"]] * 2)
    host = vla.predict_action(input_ids=ids, pixel_values=px, attention_mask=mask, unnorm_key="bridge_orig")
    monkeypatch.setattr(prompt_module, "reads_on_host", lambda *a: False)
    actions: list[np.ndarray] = []
    syncs = find_host_syncs(lambda: actions.append(vla.predict_action(input_ids=ids, pixel_values=px,
                                                                      attention_mask=mask, unnorm_key="bridge_orig")))
    assert syncs == {}
    np.testing.assert_allclose(actions[0], host, rtol=1e-5, atol=1e-6)
