"""On-policy relabelled data: the reduced policy drives, the unreduced policy labels; the policy's own action
statistics carry over to fine-tuning on it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

pytest.importorskip("tensorflow_datasets")

from helpers.finetune_cfg import make_cfg  # noqa: E402
from helpers.rlds_fixture import rlds_root, tiny_vla_dir  # noqa: E402

from prismatic_tr.models.tokenizer import build_prompt  # noqa: E402
from prismatic_tr.policy import bundled  # noqa: E402
from prismatic_tr.policy.closed_loop import run_episodes  # noqa: E402
from prismatic_tr.policy.onpolicy import relabelled_episodes  # noqa: E402
from prismatic_tr.training.preflight import plan_data  # noqa: E402
from prismatic_tr.vla import reductions_attached  # noqa: E402
from prismatic_tr.vla.spec import parse_setting  # noqa: E402
from vla_scripts.make_onpolicy_data import main  # noqa: E402

SEEDS = [3000, 3001, 3002]  # demonstrations split, after the recipe's 3000 demonstrations


def _bundled_or_skip():
    if not (bundled.BUNDLED_POLICY_DIR / "config.json").is_file():
        pytest.skip(f"no bundled policy in {bundled.BUNDLED_POLICY_DIR}")
    return bundled.load_bundled_policy()


@pytest.mark.slow
def test_student_drives_and_teacher_labels():
    """The episodes are the student's (same outcomes and lengths as the student run alone); every recorded action is
    the teacher's on the image the student saw, and somewhere it is not the student's own."""
    student, processor = _bundled_or_skip()
    teacher, _ = bundled.load_bundled_policy()
    setting = parse_setting("vision:diverse:0.1@0.25")
    key = bundled.UNNORM_KEY
    with reductions_attached(student.eval(), setting.reductions()), torch.no_grad():
        results = list(relabelled_episodes(student, teacher.eval(), processor, SEEDS, key, batch_size=3))
        alone = run_episodes(student, processor, SEEDS, key, batch_size=3)
        assert [(r.seed, r.outcome, r.steps) for r in results] == [(o.seed, o.outcome, o.steps) for o in alone]
        differs = 0
        for r in results:
            assert len(r.images) == len(r.actions) == len(r.states) == r.steps and r.final_image is not None
            for image, label in zip(r.images, r.actions, strict=True):
                inputs = processor([build_prompt(r.instruction)], [image])
                want = np.asarray(teacher.predict_action(**inputs, unnorm_key=key, do_sample=False)).reshape(-1)
                np.testing.assert_allclose(label, want, atol=1e-5)
                own = np.asarray(student.predict_action(**inputs, unnorm_key=key, do_sample=False)).reshape(-1)
                differs += int(not np.allclose(own, want, atol=1e-5))
    assert differs > 0


@pytest.mark.parametrize("extra, match", [
    (["--setting", "none"], "reduces nothing"),
    (["--setting", "bogus:0.5"], "bogus"),
    (["--seed", "499999", "--num_episodes", "2"], "vision_pretraining"),
    (["--num_episodes", "0"], "--num_episodes 0 is not allowed"),
    (["--vla_path", "/nonexistent"], "not a checkpoint directory"),
])
def test_cli_rejects_bad_input_before_work(tmp_path, capsys, extra, match):
    with pytest.raises(SystemExit) as exit_info:
        main(["--output_dir", str(tmp_path / "out"), *extra])
    assert exit_info.value.code == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_norm_stats_from_vla_keeps_the_policys_action_statistics(tmp_path_factory, tmp_path):
    base = tmp_path_factory.getbasetemp()
    paths = (rlds_root(base), tiny_vla_dir(base))
    computed = plan_data(make_cfg(paths, tmp_path), 1).stats
    with pytest.raises(ValueError, match="needs action statistics for dataset 'tiny_rlds'"):
        plan_data(make_cfg(paths, tmp_path, norm_stats_from_vla=True), 1)
    vla_dir = tmp_path / "vla"
    shutil.copytree(paths[1], vla_dir)
    own = json.loads(json.dumps(computed))["tiny_rlds"]["action"]
    own["q01"] = [v - 0.5 for v in own["q01"]]
    (vla_dir / "dataset_statistics.json").write_text(json.dumps({"tiny_rlds": {"action": own}}))
    stats = plan_data(make_cfg((paths[0], vla_dir), tmp_path, norm_stats_from_vla=True), 1).stats["tiny_rlds"]
    assert stats["action"] == own and stats["num_transitions"] == computed["tiny_rlds"]["num_transitions"]
