"""benchmarks/metaworld_camera_budget.py (issue 48's experiment): with equal budgets its per-camera cover is the
`diverse` projector reduction itself; unequal budgets keep each camera's own count, at the right positions; the
patched class is put back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.benchmark_scripts import load_benchmark

from prismatic_tr.models import build_oft_vla
from prismatic_tr.vla import apply_token_reduction_spec, remove_token_reduction
from prismatic_tr.vla.layout import PerImageReducer
from prismatic_tr.vla.scope import reduction_call


def observe(vla: torch.nn.Module, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad(), reduction_call(vla) as call:
        return vla.embed_observation(pixels, torch.zeros(1, 8)), call.kept


def test_budgets_per_camera() -> None:
    script = load_benchmark("metaworld_camera_budget")
    vla = build_oft_vla("tiny", oft={"num_images_in_input": 2, "proprio_dim": 8}, seed=0).eval()
    pixels = torch.randn(1, 12, 224, 224, generator=torch.Generator().manual_seed(0))
    original = PerImageReducer.reduce
    apply_token_reduction_spec(vla, "diverse:0.25")
    try:
        own = observe(vla, pixels)
        with script.camera_budgets([0.25, 0.25]):
            same = observe(vla, pixels)
        with script.camera_budgets([0.1, 0.4]):
            tokens, kept = observe(vla, pixels)
    finally:
        remove_token_reduction(vla)
    assert torch.equal(own[0], same[0]) and torch.equal(own[1], same[1])
    assert tokens.shape[1] == 26 + 102 + 1 and kept.shape[1] == 128  # + the proprio token
    assert (kept[0, :26] < 256).all() and (kept[0, 26:] >= 256).all()
    assert PerImageReducer.reduce is original


def test_budgets_per_camera_with_a_merging_setting() -> None:
    """With `diverse_merge`, equal budgets are the setting itself (tokens, positions and sizes); unequal ones merge
    each camera's patches into that camera's kept tokens, so each camera's sizes add up to its 256 patches."""
    script = load_benchmark("metaworld_camera_budget")
    vla = build_oft_vla("tiny", oft={"num_images_in_input": 2, "proprio_dim": 8}, seed=0).eval()
    pixels = torch.randn(1, 12, 224, 224, generator=torch.Generator().manual_seed(0))

    def observe_sizes() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.no_grad(), reduction_call(vla) as call:
            return vla.embed_observation(pixels, torch.zeros(1, 8)), call.kept, call.sizes

    apply_token_reduction_spec(vla, "diverse_merge:0.5")
    try:
        own = observe_sizes()
        with script.camera_budgets([0.5, 0.5]):
            same = observe_sizes()
        with script.camera_budgets([0.25, 0.75]):
            tokens, kept, sizes = observe_sizes()
    finally:
        remove_token_reduction(vla)
    for a, b in zip(own, same, strict=True):
        assert torch.equal(a, b)
    assert tokens.shape[1] == 64 + 192 + 1 and kept.shape[1] == 256
    assert (kept[0, :64] < 256).all() and (kept[0, 64:] >= 256).all()
    assert sizes[0, :64].sum() == 256 and sizes[0, 64:].sum() == 256


def test_a_patched_runs_journal_starts_with_the_plain_runs_unreduced_jobs(tmp_path: Path) -> None:
    """benchmarks/metaworld_seed_unreduced.py: the plain runs' identity with the patch added, then their ``none``
    jobs only, which a run of that patch then resumes from; other identities, patched sources, a patch that is not
    an object and an existing journal are refused (exit 2), nothing written."""
    import json

    from prismatic_tr.policy.job_journal import JobJournal
    from prismatic_tr.policy.metaworld_eval import JOURNAL, EvalMetaWorldConfig

    seeder = load_benchmark("metaworld_seed_unreduced")
    cfg = EvalMetaWorldConfig(split="validation", output_dir=tmp_path)
    identity = cfg.journal_identity()
    sources = []
    for name, settings in (("a", ["none", "diverse:0.5"]), ("b", ["none"])):
        path = tmp_path / name / JOURNAL
        path.parent.mkdir()
        rows = [{"setting": s, "task": f"{name}-v3", "outcomes": [{"seed": 1, "instruction": "go", "outcome": "success", "steps": 3}]}
                for s in settings]
        path.write_text("\n".join(json.dumps(r) for r in [{"identity": identity, "started_utc": "t"}, *rows]) + "\n")
        sources.append(path)
    patch = {"camera_budgets": [0.2, 0.8]}
    out = tmp_path / "out"
    assert seeder.main(["--output_dir", str(out), "--patch", json.dumps(patch), "--sources", *map(str, sources)]) == 0
    journal = JobJournal(out / JOURNAL, cfg.journal_identity(patch))
    assert journal.missing(["none", "diverse:0.5"], ["a-v3", "b-v3"]) == [("diverse:0.5", "a-v3"), ("diverse:0.5", "b-v3")]
    other = tmp_path / "c" / JOURNAL
    other.parent.mkdir()
    other.write_text(json.dumps({"identity": {**identity, "episodes": 99}, "started_utc": "t"}) + "\n")
    patched = tmp_path / "d" / JOURNAL
    patched.parent.mkdir()
    patched.write_text(json.dumps({"identity": {**identity, "patch": patch}, "started_utc": "t"}) + "\n")
    for argv in (["--patch", json.dumps(patch), "--sources", str(sources[0]), str(other)],
                 ["--patch", json.dumps(patch), "--sources", str(patched)],
                 ["--patch", "[0.2, 0.8]", "--sources", str(sources[0])],
                 ["--patch", "{", "--sources", str(sources[0])]):
        with pytest.raises(SystemExit) as exit_info:
            seeder.main(["--output_dir", str(tmp_path / "new"), *argv])
        assert exit_info.value.code == 2
    assert not (tmp_path / "new").exists()
    with pytest.raises(SystemExit) as exit_info:
        seeder.main(["--output_dir", str(out), "--patch", json.dumps(patch), "--sources", str(sources[0])])
    assert exit_info.value.code == 2
