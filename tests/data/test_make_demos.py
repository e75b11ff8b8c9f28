"""Expert demonstrations as RLDS (prismatic_tr.envs.demos, vla_scripts/make_demos.py): the fine-tuning data
layer reads them unchanged (keys, shapes, instructions, statistics, training examples); the CLI writes,
refuses to clobber, and exits 2 on bad flags before running any episode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch  # noqa: F401  (torch before tensorflow)

pytest.importorskip("tensorflow_datasets")

from prismatic_tr.data import ActionPromptTransform, RLDSSource, compute_dataset_statistics  # noqa: E402
from prismatic_tr.data._tf import import_tf  # noqa: E402
from prismatic_tr.envs import spec  # noqa: E402
from prismatic_tr.envs.demos import DemoConfig, expert_episode, make_demos  # noqa: E402
from vla_scripts import make_demos as cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRAIN, VAL, SEED = 3, 2, 11


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory):
    cfg = DemoConfig(num_episodes=TRAIN, num_val_episodes=VAL, seed=SEED, output_dir=tmp_path_factory.mktemp("demos"),
                     dataset_name="tabletop_test", motion_noise=0.3, gripper_noise=0.2, preview=True, progress=False)
    return cfg, make_demos(cfg)


def _expected(cfg: DemoConfig, seeds: range) -> list:
    return [expert_episode(s, cfg.task_config(), cfg.motion_noise, cfg.gripper_noise) for s in seeds]


def test_rlds_source_reads_the_demos_unchanged(written):
    cfg, report = written
    assert sorted(p.name for p in cfg.output_dir.iterdir()) == ["tabletop_test"]  # nothing else under output_dir
    for split, seeds in cfg.split_seeds().items():
        src = RLDSSource(cfg.output_dir, cfg.dataset_name, split)
        assert (src.keys.image, src.keys.instruction, src.keys.action) == ("observation/image", "language_instruction", "action")
        assert src.num_episodes == len(seeds)
        steps = list(src.decode(src.step_dataset()).as_numpy_iterator())
        expected = [(r.instruction, img, act) for r in _expected(cfg, seeds) for img, act in zip(r.images, r.actions, strict=True)]
        assert len(steps) == len(expected) == src.num_transitions()
        for step, (text, image, action) in zip(steps, expected, strict=True):
            assert step["instruction"].decode() == text
            assert step["image"].shape == (224, 224, 3) and step["image"].dtype == np.uint8
            assert step["image"].tobytes() == image.tobytes()  # PNG: lossless
            assert step["action"].dtype == np.float32 and np.array_equal(step["action"], action)


def test_episode_fields_follow_rlds(written):
    cfg, report = written
    _, tfds = import_tf()
    builder = tfds.builder_from_directory(str(report.version_dir))
    episodes = list(builder.as_dataset(split="train"))
    results = _expected(cfg, cfg.split_seeds()["train"])
    assert len(episodes) == len(results) == TRAIN
    for episode, result in zip(episodes, results, strict=True):
        steps = list(episode["steps"].as_numpy_iterator())
        n = len(steps)
        assert [s["is_first"] for s in steps] == [True] + [False] * (n - 1)
        assert [s["is_last"] for s in steps] == [False] * (n - 1) + [True]
        assert [s["is_terminal"] for s in steps] == [False] * (n - 1) + [result.success]
        assert [float(s["reward"]) for s in steps] == [0.0] * (n - 1) + [1.0]
        assert all(float(s["discount"]) == 1.0 for s in steps)
        states = np.stack([s["observation"]["state"] for s in steps])
        assert np.allclose(states[:, :3], [st.effector for st in result.states])
        meta = {k: v.numpy() for k, v in episode["episode_metadata"].items()}
        assert int(meta["seed"]) == result.seed and bool(meta["success"]) and meta["outcome"].decode() == "success"
        assert (meta["kind"].decode(), meta["target"].decode()) == (result.kind, result.target)
        assert steps[0]["language_instruction"].decode() == result.instruction


def test_finetuning_statistics_and_examples_work_on_the_demos(written):
    cfg, _ = written
    src = RLDSSource(cfg.output_dir, cfg.dataset_name, "train")
    stats = compute_dataset_statistics(cfg.dataset_name, src.iter_actions(), src.num_episodes)[cfg.dataset_name]
    assert stats["num_trajectories"] == TRAIN
    q01, q99 = np.array(stats["action"]["q01"]), np.array(stats["action"]["q99"])
    assert (q01 >= spec.ACTION_LOW - 1e-6).all() and (q99 <= spec.ACTION_HIGH + 1e-6).all()
    assert np.abs(np.r_[q01[:2], q99[:2]]).max() == pytest.approx(spec.MAX_XY_STEP)  # saturated moves
    from prismatic_tr.models import build_processor, make_config

    processor = build_processor(make_config("tiny"))
    transform = ActionPromptTransform(processor, processor.tokenizer.vocab_size, processor.tokenizer.eos_token_id, stats)
    example = transform(next(src.decode(src.step_dataset()).as_numpy_iterator()))
    assert example["pixel_values"].ndim == 3 and (example["labels"] != -100).sum() == spec.ACTION_DIM + 1


def test_summary_and_preview(written):
    cfg, report = written
    summary = json.loads(report.summary_path.read_text())
    assert summary["first_unseen_seed"] == report.first_unseen_seed == SEED + TRAIN + VAL
    assert summary["splits"]["train"]["episodes"] == TRAIN and summary["splits"]["val"]["first_seed"] == SEED + TRAIN
    assert summary["splits"]["train"]["success_rate"] == 1.0 and summary["config"]["motion_noise"] == 0.3
    assert report.preview_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_writes_refuses_to_clobber_and_overwrites(tmp_path, capsys):
    flags = ["--num_episodes", "2", "--output_dir", str(tmp_path), "--dataset_name", "cli_demo", "--progress", "false"]
    report = cli.main(cli.parse_config(flags))
    out = capsys.readouterr().out
    assert "train: expert success 2/2 (100.0 %)" in out and "episode length mean" in out
    assert str(report.version_dir) in out and "seeds >= 2 are unseen" in out
    with pytest.raises(SystemExit) as exc:
        cli.main(cli.parse_config(flags))
    assert exc.value.code == 2 and "already exists" in capsys.readouterr().err
    cli.main(cli.parse_config(flags + ["--overwrite", "true", "--seed", "5"]))
    assert json.loads((tmp_path / "cli_demo" / "demos.json").read_text())["splits"]["train"]["first_seed"] == 5


BAD_FLAGS = [
    (["--num_episodes", "0"], "num_episodes"),
    (["--num_val_episodes", "-1"], "num_val_episodes"),
    (["--seed", "-3"], "-3"),
    (["--seed", "499999", "--num_episodes", "2"], "overlap vision_pretraining (500,000-999,999)"),
    (["--dataset_name", "Bad-Name"], "Bad-Name"),
    (["--kinds", "[pick,fly]"], "fly"),
    (["--min_objects", "0"], "min_objects=0"),
    (["--max_objects", "9"], "max_objects=9"),
    (["--max_steps", "0"], "max_steps=0"),
    (["--motion_noise", "2"], "motion_noise=2"),
    (["--gripper_noise", "-1"], "gripper_noise=-1"),
]


@pytest.mark.parametrize("flags, needle", BAD_FLAGS)
def test_bad_flags_exit_2_before_any_episode(flags, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "make_demos", lambda cfg: pytest.fail("episodes were run for bad flags"))
    with pytest.raises(SystemExit) as exc:
        cli.main(cli.parse_config(flags + ["--output_dir", str(tmp_path)]))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "make_demos.py: error" in err and needle in err


def test_output_dir_that_is_a_file_exits_2(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(SystemExit) as exc:
        cli.parse_config(["--output_dir", str(afile)])
    assert exc.value.code == 2 and str(afile) in capsys.readouterr().err


@pytest.mark.slow
def test_script_runs_as_a_program():
    """``--help`` describes the program; a bad flag exits 2 (the script resolves its imports)."""
    script, env = ROOT / "vla_scripts" / "make_demos.py", {**os.environ, "PYTHONPATH": str(ROOT)}
    helped = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, env=env, timeout=300)
    assert helped.returncode == 0 and "RLDS" in helped.stdout and "--num_episodes" in helped.stdout
    bad = subprocess.run([sys.executable, str(script), "--num_episodes", "-5"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert bad.returncode == 2 and "-5" in bad.stderr
