"""The MetaWorld policy's commands: ``vla_scripts/train_metaworld_policy.py`` (demonstrations -> OFT training ->
choice on validation -> test per task, every closed loop in a spawned child) and ``vla_scripts/eval_metaworld.py``
(the reduction table), at toy size. Flag checks and the table's pure parts run everywhere; the end-to-end run needs
metaworld and OSMesa and is skipped with the reason elsewhere.

Nothing here times anything; the full-size policy's success is measured by the commands and recorded in
``benchmarks/results/metaworld/``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers.metaworld import MISSING, needs_metaworld
from helpers.oft_fixtures import write_tiny_base

from prismatic_tr.envs.metaworld.tasks import STATE_FIELDS
from prismatic_tr.eval.intervals import paired_difference_interval, wilson_interval
from prismatic_tr.policy.metaworld import TABLE_SETTINGS, evaluate_metaworld_settings
from prismatic_tr.policy.metaworld_records import provenance
from prismatic_tr.policy.metaworld_workers import MetaWorldWorkers, worker_threads
from prismatic_tr.vla.spec import parse_setting
from tools.report import cells, metaworld
from vla_scripts import eval_metaworld, train_metaworld_policy

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, match", [
    (["--tasks", "[reach-v3,fly-v3]"], "fly-v3"),
    (["--tasks", "[reach-v3,reach-v3]"], "name each task once"),
    (["--chunk", "0"], "--chunk 0"),
    (["--execute_steps", "9"], "--execute_steps 9"),
    (["--test_episodes", "0"], "--test_episodes 0"),
    (["--image_size", "16"], "--image_size 16"),
    (["--data_root", "/nonexistent"], "holds no metaworld_mt10"),
    (["--base_policy", "/nonexistent"], "--base_policy"),
    (["--setting", "vision:nonsense:0.1"], "nonsense"),
    (["--eval_workers", "0"], "--eval_workers 0"),
    (["--task_floor", "1.5"], "--task_floor 1.5 is not allowed"),
])
def test_training_command_refuses_bad_flags_with_exit_2(argv: list[str], match: str,
                                                        capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        train_metaworld_policy.parse_config(argv)
    assert exc.value.code == 2 and match in capsys.readouterr().err


def test_training_command_refuses_demonstrations_written_with_another_count(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    written = tmp_path / "stage1" / "data" / "metaworld_mt10"   # stage 1's, where the command writes them
    written.mkdir(parents=True)
    (written / "demos.json").write_text(json.dumps({"config": {"episodes_per_task": 5}}))
    with pytest.raises(SystemExit) as exc:
        train_metaworld_policy.parse_config(["--output_dir", str(tmp_path), "--episodes_per_task", "50"])
    assert exc.value.code == 2 and "holds 5 demonstrations per task" in capsys.readouterr().err


def test_training_command_counts_demonstrations_per_task(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    flags = ["--output_dir", str(tmp_path), "--episodes_per_task", "5", "--task_episodes", "{push-v3: 9}"]
    cfg = train_metaworld_policy.parse_config(flags)
    demo = cfg.demo_config()
    assert (demo.episodes_of("push-v3"), demo.episodes_of("reach-v3")) == (9, 5)
    written = tmp_path / "stage1" / "data" / "metaworld_mt10"
    written.mkdir(parents=True)
    (written / "demos.json").write_text(json.dumps({"config": {"episodes_per_task": 5, "task_episodes": {"push-v3": 9}},
                                                    "state_fields": list(STATE_FIELDS)}))
    assert train_metaworld_policy.parse_config(flags).task_episodes == {"push-v3": 9}   # the same counts: reused
    with pytest.raises(SystemExit) as exc:
        train_metaworld_policy.parse_config(flags[:4])
    assert exc.value.code == 2 and "({'push-v3': 9} named)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        train_metaworld_policy.parse_config([*flags[:4], "--task_episodes", "{fly-v3: 9}"])
    assert exc.value.code == 2 and "fly-v3" in capsys.readouterr().err


def test_stage_2_runs_when_the_reference_policy_is_trained_and_its_flags_are_checked_first(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Stage 2 by default (1500 steps from stage 1's policy, on demonstrations of its own), none when fine-tuning
    (--init_oft) or training under a setting; its bad flags exit 2 before any work."""
    from prismatic_tr.policy.metaworld_recipe import REFINE_STEPS, REFINE_TASK_EPISODES

    cfg = train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "run")])
    assert cfg.refine_steps == REFINE_STEPS == 1500 and cfg.refine.task_episodes == REFINE_TASK_EPISODES
    one = cfg.stage(1)
    assert one.output_dir == tmp_path / "run" / "stage1" and one.refine_steps == 0 and one.max_steps == 4000
    policy = write_tiny_oft_config(tmp_path / "stage1_policy")
    two = cfg.stage(2, init_oft=policy)
    assert (two.output_dir, two.init_oft, two.max_steps, two.learning_rate, two.save_steps) == \
        (tmp_path / "run" / "stage2", policy, 1500, 2e-4, 500)
    assert (two.episodes_per_task, two.task_episodes, two.refine_steps) == (20, REFINE_TASK_EPISODES, 0)
    assert train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "a"), "--setting",
                                                "diverse:0.5"]).refine_steps == 0
    assert train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "b"), "--init_oft", str(policy)
                                                ]).refine_steps == 0
    assert train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "c"), "--refine.max_steps",
                                                "0"]).refine_steps == 0
    for argv, match in ((["--refine.max_steps", "-1"], "--refine.max_steps -1"),
                        (["--refine.learning_rate", "0"], "--refine.learning_rate 0"),
                        (["--refine.save_steps", "0"], "--refine.save_steps 0"),
                        (["--refine.task_episodes", "{fly-v3: 2}"], "--refine.task_episodes names 'fly-v3'")):
        with pytest.raises(SystemExit) as exc:
            train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "d"), *argv])
        assert exc.value.code == 2 and match in capsys.readouterr().err, argv
    assert not (tmp_path / "d").exists()


def test_on_policy_fine_tuning_needs_a_policy_and_a_reduction_and_refuses_other_data(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--onpolicy_episodes: the job it makes from the flags (the policy drives with the setting and labels without
    it), and each companion it needs or refuses, exit 2 before any work."""
    policy = write_tiny_oft_config(tmp_path / "policy")
    flags = ["--init_oft", str(policy), "--setting", "diverse:0.1", "--onpolicy_episodes", "3"]
    cfg = train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "ok"), *flags])
    from prismatic_tr.policy.metaworld_onpolicy import onpolicy_job

    job = onpolicy_job(cfg)
    assert (job.checkpoint, job.setting, job.episodes_per_task, job.seed, job.chunk) == \
        (str(policy), "diverse:0.1", 3, 100_000, 8)
    assert job.seeds() == [100_000, 100_001, 100_002] and cfg.refine_steps == 0
    assert job.teacher is None and job.identity()["teacher"] == str(policy)   # the policy labels its own episodes
    second = train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "round2"), *flags,
                                                  "--onpolicy_teacher", str(policy)])
    assert onpolicy_job(second).identity()["teacher"] == str(policy)
    written = tmp_path / "ok" / "data" / "metaworld_mt10"
    written.mkdir(parents=True)
    (written / "onpolicy.json").write_text(json.dumps({"job": {**job.identity(), "episodes_per_task": 5}}))
    for argv, match in ((["--output_dir", str(tmp_path / "ok"), *flags], "episodes_per_task differ"),
                        ([*flags[2:]], "needs --init_oft"),
                        ([*flags[:2], "--onpolicy_episodes", "3"], "a --setting that reduces"),
                        ([*flags, "--data_root", str(tmp_path)], "omit --data_root"),
                        ([*flags, "--refine.max_steps", "5"], "omit --data_root and --refine.max_steps"),
                        ([*flags, "--onpolicy_seed", "499999"], "--onpolicy_seed 499999"),
                        ([*flags[:4], "--onpolicy_episodes", "-1"], "--onpolicy_episodes -1"),
                        ([*flags, "--onpolicy_teacher", str(tmp_path)], "--onpolicy_teacher")):
        with pytest.raises(SystemExit) as exc:
            train_metaworld_policy.parse_config(argv if "--output_dir" in argv
                                                else ["--output_dir", str(tmp_path / "bad"), *argv])
        assert exc.value.code == 2 and match in capsys.readouterr().err, argv
    assert not (tmp_path / "bad").exists()


def test_an_on_policy_round_aggregates_only_earlier_rounds_labelled_by_the_same_policy(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--onpolicy_aggregate (DAgger's aggregation): earlier rounds' data roots are taken when they hold a finished
    round of the same tasks, chunk and frames labelled by the same teacher; anything else exits 2 naming it."""
    from prismatic_tr.policy.metaworld_onpolicy import onpolicy_job

    policy, other = write_tiny_oft_config(tmp_path / "policy"), write_tiny_oft_config(tmp_path / "other")
    flags = ["--init_oft", str(other), "--onpolicy_teacher", str(policy), "--setting", "diverse:0.1",
             "--onpolicy_episodes", "3"]
    first = train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "round1"), "--init_oft", str(policy),
                                                 "--setting", "diverse:0.1", "--onpolicy_episodes", "3"])
    round1 = tmp_path / "round1" / "data"
    (round1 / "metaworld_mt10").mkdir(parents=True)
    (round1 / "metaworld_mt10" / "onpolicy.json").write_text(json.dumps({"job": onpolicy_job(first).identity()}))
    cfg = train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "round2"), *flags,
                                               "--onpolicy_aggregate", f"[{round1}]"])
    assert cfg.onpolicy_aggregate == [str(round1)]
    relabelled = tmp_path / "relabelled" / "metaworld_mt10"
    relabelled.mkdir(parents=True)
    (relabelled / "onpolicy.json").write_text(json.dumps({"job": {**onpolicy_job(first).identity(), "chunk": 4,
                                                                   "teacher": str(other)}}))
    for extra, match in ((["--onpolicy_aggregate", f"[{tmp_path / 'round2' / 'data'}]"], "this round's own data"),
                         (["--onpolicy_aggregate", f"[{tmp_path}]"], "holds no finished on-policy round"),
                         (["--onpolicy_aggregate", f"[{relabelled.parent}]"], "chunk, teacher")):
        with pytest.raises(SystemExit) as exc:
            train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "round2"), *flags, *extra])
        assert exc.value.code == 2 and match in capsys.readouterr().err, extra
    with pytest.raises(SystemExit) as exc:   # aggregation belongs to a round of on-policy episodes
        train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "bad"), "--onpolicy_aggregate",
                                             f"[{round1}]"])
    assert exc.value.code == 2 and "give --onpolicy_episodes too" in capsys.readouterr().err


def test_a_lora_fine_tune_is_an_adapter_of_a_policy_for_a_setting_and_its_trainer_gets_the_recipes_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--lora_rank: the trainer of the tabletop adapters gets the recipe's data, setting and schedule (the policy's
    own statistics, one checkpoint kept per save); without a policy, a reducing setting or with flags it cannot
    honour, exit 2 before any work."""
    from prismatic_tr.policy.metaworld_lora import finetune_config

    policy = write_tiny_oft_config(tmp_path / "policy")
    flags = ["--init_oft", str(policy), "--setting", "vision:diverse:0.1@0.25", "--onpolicy_episodes", "3",
             "--lora_rank", "8", "--max_steps", "600", "--save_steps", "200", "--learning_rate", "5e-4"]
    cfg = train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "ok"), *flags])
    ft = finetune_config(cfg, tmp_path / "ok" / "data", "metaworld_mt10")
    assert (ft.vla_path, ft.lora_rank, ft.max_steps, ft.save_steps, ft.learning_rate, ft.lr_schedule) == \
        (str(policy), 8, 600, 200, 5e-4, "cosine")
    assert ft.use_lora and ft.norm_stats_from_vla and not ft.save_latest_checkpoint_only and ft.distill_weight == 0
    assert (ft.token_reduction.site, ft.token_reduction.keep_ratio, ft.token_reduction.depth_fraction) == \
        ("vision", 0.1, 0.25)
    assert ft.run_root_dir == tmp_path / "ok" / "runs" and ft.data_root_dir == tmp_path / "ok" / "data"
    assert ft.aggregate_data_roots == []
    # an earlier round of the same job trains beside this one's episodes, as for the whole policy
    from prismatic_tr.policy.metaworld_onpolicy import onpolicy_job

    round1 = tmp_path / "round1" / "data"
    (round1 / "metaworld_mt10").mkdir(parents=True)
    (round1 / "metaworld_mt10" / "onpolicy.json").write_text(json.dumps({"job": onpolicy_job(cfg).identity()}))
    more = train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "more"), *flags, "--onpolicy_seed",
                                                "100003", "--onpolicy_aggregate", f"[{round1}]"])
    assert finetune_config(more, tmp_path / "more" / "data", "metaworld_mt10").aggregate_data_roots == [round1]
    for argv, match in ((["--lora_rank", "8"], "give --init_oft and a --setting that reduces"),
                        ([*flags[:2], "--lora_rank", "8"], "a --setting that reduces"),
                        ([*flags, "--lora_rank", "-1"], "--lora_rank -1"),
                        ([*flags, "--onpolicy_aggregate", f"[{tmp_path}]"], "holds no finished on-policy round")):
        with pytest.raises(SystemExit) as exc:
            train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "bad"), *argv])
        assert exc.value.code == 2 and match in capsys.readouterr().err, argv
    assert not (tmp_path / "bad").exists()


def write_tiny_oft_config(path: Path) -> Path:
    """A directory that passes the recipe's checks on ``--init_oft`` (a config.json of a 7-D-state policy)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"oft": {"proprio_dim": 7, "proprio_slots": True}}))
    return path


def test_a_run_chosen_under_another_floor_is_chosen_again_from_its_scores_then_tested_not_trained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The per-task floor (--task_floor, 0.7 of the validation episodes) came after runs chosen without one: such a
    run is chosen again from the scores its record holds (no validation episode run again, no training) and its
    new choice tested; a run chosen as the flags choose is returned as it is."""
    from prismatic_tr.policy import metaworld_recipe
    from prismatic_tr.policy.checkpoint_choice import RULE

    policy = write_tiny_oft_config(tmp_path / "policy_in")
    cfg = train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "run"), "--init_oft", str(policy)])
    assert cfg.task_floor == 0.7 and cfg.floor_successes == 7
    checkpoints, candidates = {}, []
    for step, per_task in ((500, [5, 9]), (1000, [10, 6]), (1500, [8, 7])):   # 1000 has the most, one task at 6
        checkpoints[str(step)] = str(write_tiny_oft_config(tmp_path / "run" / "checkpoints" / f"step_{step}"))
        candidates.append({"step": step, "checkpoint": checkpoints[str(step)], "successes": sum(per_task),
                           "per_task": dict(zip(["reach-v3", "push-v3"], per_task, strict=True)), "wall_s": 60.0})
    old_config = {k: v for k, v in cfg.to_record().items() if k != "task_floor"}
    record = {"config": old_config, "base_policy": str(policy), "demonstrations": {"data_root": str(tmp_path)},
              "training": {"steps": 4000, "last_loss": 0.02, "checkpoints": checkpoints},
              "selection": {"episodes_per_task": 10, "split": "validation", "rule": RULE.format(over=""),
                            "candidates": candidates, "chosen": checkpoints["1000"]},
              "minutes": {"demonstrations": 1.0, "training": 30.0, "selection": 25.0},
              "evaluation": {"test": {"mean_success_rate": 0.892}}}
    (tmp_path / "run" / "evaluation.json").write_text(json.dumps(record))
    assert metaworld_recipe.finished_stage(cfg, test=True) is None and metaworld_recipe.trained_stage(cfg)
    runs: list[tuple[Path, str]] = []

    def evaluate(checkpoint: Path, split: str, episodes: int, cfg, setting=None) -> dict:
        assert split == "test", f"{checkpoint} run on {split}: its scores were recorded"
        runs.append((checkpoint, split))
        return {"mean_success_rate": 0.924, "tasks": {}, "wall_s": 6.0}

    monkeypatch.setattr(metaworld_recipe, "evaluate", evaluate)
    again = metaworld_recipe.run_stage(cfg)
    assert "chosen again: 10 validation episodes a task, every task >= 7" in capsys.readouterr().out
    assert again["checkpoint"] == checkpoints["1500"] and again["selection"]["reach_floor"] == [1500]
    assert again["selection"]["scores_from"] == str(tmp_path / "run" / "evaluation.json")
    assert runs == [(tmp_path / "run" / "policy", "test")] and again["evaluation"]["test"]["mean_success_rate"] == 0.924
    assert again["minutes"]["training"] == 30.0 and again["minutes"]["selection"] >= 25.0
    assert again["training"]["last_loss"] == 0.02 and again["config"]["task_floor"] == 0.7
    assert metaworld_recipe.run_stage(cfg) == json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert len(runs) == 1   # chosen as these flags choose, tested: not run again
    # with no floor the record's own choice holds again
    no_floor = train_metaworld_policy.parse_config(["--output_dir", str(tmp_path / "run"), "--init_oft", str(policy),
                                                    "--task_floor", "0"])
    assert metaworld_recipe.run_stage(no_floor)["checkpoint"] == checkpoints["1000"] and len(runs) == 2


def test_training_command_refuses_demonstrations_and_policies_of_another_state(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    data = tmp_path / "data" / "metaworld_mt10"
    data.mkdir(parents=True)
    (data / "demos.json").write_text(json.dumps({"config": {"episodes_per_task": 50}}))   # written before the goal
    with pytest.raises(SystemExit) as exc:
        train_metaworld_policy.parse_config(["--data_root", str(tmp_path / "data")])
    assert exc.value.code == 2 and "4-D state written before the goal joined it" in capsys.readouterr().err
    (data / "demos.json").write_text(json.dumps({"config": {"episodes_per_task": 50},
                                                 "state_fields": list(STATE_FIELDS)}))
    old = tmp_path / "old_policy"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"oft": {"proprio_dim": 4}}))
    with pytest.raises(SystemExit) as exc:
        train_metaworld_policy.parse_config(["--data_root", str(tmp_path / "data"), "--init_oft", str(old)])
    assert exc.value.code == 2 and "takes a state of 4; MetaWorld episodes give 7" in capsys.readouterr().err
    (old / "config.json").write_text(json.dumps({"oft": {"proprio_dim": 7}}))   # OFT's zero slots
    with pytest.raises(SystemExit) as exc:
        train_metaworld_policy.parse_config(["--data_root", str(tmp_path / "data"), "--init_oft", str(old)])
    assert exc.value.code == 2 and "has proprio_slots=False, not --proprio_slots True" in capsys.readouterr().err
    cfg = train_metaworld_policy.parse_config(["--data_root", str(tmp_path / "data"), "--init_oft", str(old),
                                               "--proprio_slots", "false", "--output_dir", str(tmp_path / "out")])
    assert not cfg.settings().proprio_slots


@pytest.mark.parametrize("argv, match", [
    (["--settings", "[diverse:0.5]"], "start with 'none'"),
    (["--tasks", "[fly-v3]"], "fly-v3"),
    (["--split", "offline"], "'offline' is not allowed"),
    (["--episodes", "0"], "--episodes 0"),
    (["--vla_path", "/nonexistent"], "not a checkpoint directory"),
    (["--workers", "0"], "--workers 0"),
])
def test_evaluation_command_refuses_bad_flags_with_exit_2(argv: list[str], match: str,
                                                          capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        eval_metaworld.parse_config(argv)
    assert exc.value.code == 2 and match in capsys.readouterr().err


def test_the_table_has_the_issues_settings_and_needs_its_baseline_first() -> None:
    settings = [parse_setting(s) for s in TABLE_SETTINGS]
    assert settings[0].is_baseline and len({s.label for s in settings}) == 8
    assert [s.parts[0].site for s in settings[1:]] == ["projector"] * 3 + ["vision"] * 3 + ["llm"]
    assert [s.parts[0].keep_ratio for s in settings[1:7]] == [0.5, 0.25, 0.1] * 2
    with pytest.raises(ValueError, match="baseline"):
        evaluate_metaworld_settings(None, None, settings[1:], ["reach-v3"], "test", 1, "k")


def test_worker_pools_refuse_bad_counts_and_paths_before_starting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="workers 0"):
        MetaWorldWorkers(tmp_path, workers=0)
    with pytest.raises(ValueError, match="not a checkpoint directory"):
        MetaWorldWorkers(tmp_path, workers=2)
    (tmp_path / "config.json").write_text("{}")
    pool = MetaWorldWorkers(tmp_path, workers=2, threads=1)
    with pytest.raises(RuntimeError, match="outside its `with` block"):
        pool.run(["none"], ["reach-v3"], "test", 1, "k")
    assert worker_threads(2, 2) == 1 and worker_threads(2, 1) == 1 and worker_threads(1, 2) == 2


def test_provenance_reads_the_recipe_record_beside_a_policy_or_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "policy").mkdir()
    (tmp_path / "checkpoints" / "step_5").mkdir(parents=True)
    assert provenance(tmp_path / "policy") == {"trained_with": None}
    (tmp_path / "evaluation.json").write_text(json.dumps({"setting": "diverse:0.1", "base_policy": "/p",
                                                          "training": {"steps": 5}}))
    for where in (tmp_path / "policy", tmp_path / "checkpoints" / "step_5"):
        got = provenance(where)
        assert (got["trained_with"], got["started_from"], got["training_steps"]) == ("diverse:0.1", "/p", 5)


META = {"config": {"timing_runs": 10}, "command": "python c", "dtype": "float32", "machine": {"cpu": {"model": "AMD X", "features": {
    "avx2": True, "amx_bf16": False}}, "cores": 2}, "torch_version": "2.2.0", "date_utc": "2026-11-27 08:07:58"}


def test_the_readme_table_names_the_model_each_row_ran_on() -> None:
    task = {"success_rate": 0.5}
    def run(trained_with: str | None, labels: list[str]) -> dict:
        return {"meta": {"trained_with": trained_with, **META},
                "records": [{"setting": label, "num_patches": 512, "tasks": {"reach-v3": task}, "successes": 25,
                             "episodes": 50, "mean_success_rate": 0.5, "predict_action_speedup": 1.0}
                            for label in labels]}
    text = metaworld.metaworld_table(SimpleNamespace(metaworld_tables={"the policy": [
        run("none", ["none", "diverse:0.1"]), run("diverse:0.1", ["none", "diverse:0.1"])], "none yet": []},
        metaworld_finetunes={}))
    lines = text.splitlines()
    assert "Model" in lines[0] and len(lines) == 2 + 3 + 4     # the second run's own baseline is not shown
    assert "25/50, **50.0 %** (37-63 %)" in lines[2] and "The policy: `python c` on AMD X (avx2) with 2 cores" in lines[-1]
    assert "at batch 1 in float32" in lines[-1] and "none yet" not in text   # a policy without runs has no rows
    assert "`diverse:0.1` | the policy |" in lines[3]
    assert "`diverse:0.1` | the policy, fine-tuned with `diverse:0.1`" in lines[4]
    untimed = run("none", ["none"])
    untimed["meta"]["config"] = {"timing_runs": 0}
    two = metaworld.metaworld_table(SimpleNamespace(metaworld_tables={"new": [untimed], "the policy": [
        run("none", ["none", "diverse:0.1"])]}, metaworld_finetunes={})).splitlines()
    assert "| new |" in two[2] and "| the policy |" in two[3] and "New: `python c`" in two[-3]
    assert "not timed (`--timing_runs 0`" in two[-3] and "the median of 10" in two[-1]


def test_the_readme_table_adds_a_row_per_recipe_fine_tune_with_its_settings_speed_marked() -> None:
    def task(rate: float) -> dict:
        return {"success_rate": rate, "successes": round(50 * rate), "episodes": 50}
    table = {"meta": {"trained_with": None, **META}, "records": [
        {"setting": label, "num_patches": 512, "llm_visual_tokens": kept, "tasks": {"reach-v3": task(rate)},
         "successes": round(50 * rate), "episodes": 50, "mean_success_rate": rate, "predict_action_speedup": speedup}
        for label, kept, rate, speedup in (("none", 512, 0.8, 1.0), ("diverse:0.1", 52, 0.4, 1.37))]}
    finetune = {"setting": "diverse:0.1", "config": {"max_steps": 600},
                "selection": {"chosen": "/c/step_600", "candidates": [{"step": 300, "checkpoint": "/c/step_300"},
                                                                      {"step": 600, "checkpoint": "/c/step_600"}]},
                "evaluation": {"test": {"tasks": {"reach-v3": task(0.7)}, "mean_success_rate": 0.7}}}
    base = "the policy"
    onpolicy = {**finetune, "config": {"max_steps": 300, "onpolicy_episodes": 40}}
    lines = metaworld.metaworld_table(SimpleNamespace(
        metaworld_tables={"newer": [table], base: [table]},
        metaworld_finetunes={base: [finetune, onpolicy]}, shipped_adapters={})).splitlines()
    assert len(lines) == 2 + 2 + 2 + 2 + 1 + 7 and lines[-1].startswith(cells.ADAPTER_MARK)
    assert "| newer |" in lines[3] and "| the policy |" in lines[5]   # each policy's fine-tunes after its rows
    assert lines[6] == (f"| `diverse:0.1` | {base}, fine-tuned with it: 600 steps on the expert's demonstrations, "
                        "step 600 chosen on validation | 512 -> 52 in the LLM | 70 % | 35/50, **70.0 %** (56-81 %) | - | "
                        "1.37x" + cells.ADAPTER_MARK + " |")   # no seeds recorded: nothing to pair
    assert "300 steps on on-policy episodes (40 a task, labelled by the policy unreduced)" in lines[7]
    plain = metaworld.metaworld_table(SimpleNamespace(metaworld_tables={base: [table]}, metaworld_finetunes={},
                                                      shipped_adapters={}))
    assert cells.ADAPTER_MARK not in plain and len(plain.splitlines()) == 2 + 2 + 4
    other = {**onpolicy, "selection": {"chosen": "/d/step_300", "candidates": [{"step": 300, "checkpoint": "/d/step_300"}]}}
    shipped = metaworld.metaworld_table(SimpleNamespace(metaworld_tables={base: [table]}, metaworld_finetunes={
        base: [finetune, other]}, shipped_adapters={"/c/step_600": "mw-adapter"})).splitlines()
    assert "step 600 chosen on validation, shipped as `mw-adapter` |" in shipped[4]  # the adapter made from it
    assert "shipped as" not in shipped[5]                                             # chose no shipped checkpoint


def test_each_row_gives_its_cost_against_unreduced_on_the_same_episodes_with_a_paired_interval() -> None:
    def task(failed: list[int], first: int = 3_000_000) -> dict:
        return {"episodes": 50, "seeds": [first, first + 49], "successes": 50 - len(failed),
                "success_rate": (50 - len(failed)) / 50, "failed_seeds": {"timeout": failed, "wrong_object": []}}
    base, lost = list(range(3_000_000, 3_000_004)), list(range(3_000_000, 3_000_010))
    def record(label: str, failed: list[int]) -> dict:
        return {"setting": label, "num_patches": 512, "tasks": {"reach-v3": task(failed)}, "successes": 50 - len(failed),
                "episodes": 50, "mean_success_rate": (50 - len(failed)) / 50, "predict_action_speedup": 1.0}
    table = {"meta": {"trained_with": None, **META},
             "records": [record("none", base), record("diverse:0.1", lost), record("diverse:0.5", base)]}
    finetune = {"setting": "diverse:0.1", "config": {"max_steps": 600},
                "selection": {"chosen": "/c/step_600", "candidates": [{"step": 600, "checkpoint": "/c/step_600"}]},
                "evaluation": {"test": {"tasks": {"reach-v3": task(base[1:])}, "mean_success_rate": 0.94}}}
    lines = metaworld.metaworld_table(SimpleNamespace(metaworld_tables={"p": [table]}, metaworld_finetunes={
        "p": [finetune]}, shipped_adapters={})).splitlines()
    paired = [line.split(" | ")[-2] for line in lines[2:6]]   # none, diverse:0.5, diverse:0.1, the fine-tune
    assert paired[0] == "-" and paired[1] == "0.0 (-7.1 to +7.1)"   # the same episodes lost: no cost, both ways
    # keep 0.1 lost 6 episodes the unreduced policy solved and won none back (counts: both, only the setting, only
    # unreduced, neither): -12 points, and the pairing keeps its interval below 0, narrower than that of two
    # independent samples (Newcombe's square-and-add of the Wilson intervals: -25.9 to +1.9)
    assert paired[2] == cells.points_change(*paired_difference_interval(40, 0, 6, 4)) == "-12.0 (-23.4 to -2.0)"
    (l1, u1), (l2, u2) = wilson_interval(40, 50), wilson_interval(46, 50)
    independent = (-0.12 - ((0.8 - l1) ** 2 + (u2 - 0.92) ** 2) ** 0.5, -0.12 + ((0.92 - l2) ** 2 + (u1 - 0.8) ** 2) ** 0.5)
    assert cells.points_change(-0.12, *independent) == "-12.0 (-25.9 to +1.9)"
    assert paired[3] == cells.points_change(*paired_difference_interval(46, 1, 0, 3))   # the fine-tune won one back
    shifted = {**table, "records": [table["records"][0], {**record("diverse:0.1", []), "tasks": {
        "reach-v3": task([], first=4_000_000)}}]}
    lines = metaworld.metaworld_table(SimpleNamespace(metaworld_tables={"p": [shifted]}, metaworld_finetunes={},
                                                      shipped_adapters={})).splitlines()
    assert lines[3].split(" | ")[-2] == "-"      # other episodes than the unreduced row's: nothing to pair


def test_a_second_round_fine_tune_kept_at_its_last_step_says_so_in_both_tables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from prismatic_tr.policy.checkpoint_choice import LAST

    monkeypatch.setattr(metaworld, "METAWORLD_RUNS", [])   # only the fine-tune's row in the runs table

    task = {"success_rate": 0.8, "successes": 40, "episodes": 50}
    table = {"meta": {"trained_with": None, **META}, "records": [
        {"setting": label, "num_patches": 512, "tasks": {"reach-v3": task}, "successes": 40, "episodes": 50,
         "mean_success_rate": 0.8, "predict_action_speedup": 1.0} for label in ("none", "diverse:0.1")]}
    second = {"setting": "diverse:0.1", "minutes": {"demonstrations": 11.4, "training": 9, "selection": 0,
                                                    "evaluation_test": 12},
              "config": {"max_steps": 300, "onpolicy_episodes": 20, "init_oft": "/round1", "onpolicy_teacher": "/p"},
              "selection": {"episodes_per_task": 0, "rule": LAST, "candidates": ["/c/step_300"]},
              "evaluation": {"test": {"tasks": {"reach-v3": task}, "mean_success_rate": 0.8}}}
    src = SimpleNamespace(metaworld_tables={"the policy": [table]}, metaworld_finetunes={"the policy": [second]},
                          metaworld_runs=[], shipped_adapters={})
    row = metaworld.metaworld_table(src).splitlines()[4]
    assert "on-policy episodes of the first round's fine-tune (20 a task)" in row and "a second round from it" in row
    assert "the last step's checkpoint (no choice)" in row
    runs = metaworld.metaworld_runs_table(src).splitlines()
    assert runs[2].startswith("| fine-tuned with `diverse:0.1` from the policy, on-policy (20 episodes a task, "
                              "second round), 300 steps | - (the last step's checkpoint, not chosen) | 40/50, 80.0 % | "
                              "11 / 9 / 0 / 12")
    # a second round aggregated with the first (DAgger), and a LoRA adapter: both say so in both tables
    aggregated = {**second, "aggregated": [{"data_root": "/round1/data", "job": {"episodes_per_task": 40}}]}
    lora = {**second, "config": {"max_steps": 600, "onpolicy_episodes": 40, "init_oft": "/p", "lora_rank": 32}}
    seeded = {**lora, "config": {**lora["config"], "seed": 1}}   # the same recipe from another seed: named
    src.metaworld_finetunes = {"the policy": [aggregated, lora, seeded]}
    rows = metaworld.metaworld_table(src).splitlines()[4:7]
    assert "a second round from it, with the first round's (40 a task) aggregated" in rows[0]
    assert "fine-tuned with it: a LoRA adapter (rank 32), 600 steps on on-policy episodes (40 a task" in rows[1]
    assert "fine-tuned with it: a LoRA adapter (rank 32), 600 steps from seed 1 on on-policy episodes" in rows[2]
    runs = metaworld.metaworld_runs_table(src).splitlines()
    assert "on-policy (20 episodes a task, second round, 40 a task of the first aggregated), 300 steps |" in runs[2]
    assert "on-policy (40 episodes a task), LoRA rank 32, 600 steps |" in runs[3]
    assert "on-policy (40 episodes a task), LoRA rank 32, 600 steps, seed 1 |" in runs[4]


def test_the_readme_policy_table_has_a_row_per_policy_and_the_pooled_mean() -> None:
    def task(wins: int, steps: float) -> dict:
        return {"episodes": 50, "successes": wins, "success_rate": wins / 50, "success_ci_low": 0.1,
                "success_ci_high": 0.9, "mean_steps": steps}
    def policy(a: int, b: int) -> dict:
        return {"evaluation": {"test": {"tasks": {"reach-v3": task(a, 40.0), "push-v3": task(b, 60.0)},
                                        "mean_success_rate": (a + b) / 100}}}
    text = metaworld.metaworld_policy_table(SimpleNamespace(metaworld_policies={"one": policy(10, 30),
                                                                                   "two": policy(50, 0)}))
    lines = text.splitlines()
    assert "`reach`" in lines[0] and "`push`" in lines[0] and len(lines) == 2 + 2
    assert lines[2].startswith("| one | 20 % (10-90 %) | 60 % (10-90 %) | 40/100, **40.0 %** (31-50 %) | 50 |")
    assert "50/100, **50.0 %** (40-60 %)" in lines[3]


def test_csv_rows_and_table_show_every_task_and_the_mean() -> None:
    task = {"episodes": 2, "successes": 1, "success_rate": 0.5, "success_ci_low": 0.1, "success_ci_high": 0.9,
            "mean_steps": 40.0}
    records = [{"setting": label, "site": site, "reduction_ratio": r, "depth_fraction": None, "num_patches": n,
                "mean_success_rate": 0.5, "successes": 2, "episodes": 4, "tasks": {"reach-v3": task, "push-v3": task},
                "predict_action_ms": ms, "predict_action_speedup": 100.0 / ms}
               for label, site, r, n, ms in (("none", "none", None, 512, 100.0), ("diverse:0.5", "projector", 0.5,
                                                                                     256, 80.0))]
    rows = eval_metaworld.csv_rows(records)
    assert [(r["setting"], r["task"]) for r in rows] == [("none", "reach-v3"), ("none", "push-v3"), ("none", "mean"),
                                                         ("diverse:0.5", "reach-v3"), ("diverse:0.5", "push-v3"),
                                                         ("diverse:0.5", "mean")]
    assert rows[2]["successes"] == 2 and rows[2]["episodes"] == 4
    text = eval_metaworld.table(records)
    assert "reach" in text.splitlines()[0] and "1.25x" in text and "50.0%" in text


def test_the_shipped_policy_is_its_recipe_s_choice_and_acts() -> None:
    """prismatic_tr/assets/metaworld_policy: the checkpoint its recipe chose on validation, with that run's records,
    loads natively as a 2-camera OFT policy taking the 7-D state in every action slot, and gives a chunk of 8 x 7."""
    from prismatic_tr.bench.vla.job import sample_inputs
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.bundled import bundled_metaworld_policy_dir
    from prismatic_tr.policy.metaworld_recipe import DATASET

    where = bundled_metaworld_policy_dir()
    record = json.loads((where / "evaluation.json").read_text())
    assert record["selection"]["split"] == "validation" and record["selection"]["chosen"] == record["checkpoint"]
    assert list(record["evaluation"]["test"]["tasks"]) == record["config"]["tasks"]
    assert (where / "training_curve.csv").read_text().count("\n") == 1 + record["training"]["steps"]
    stage1 = json.loads((where / "stage1_evaluation.json").read_text())   # the policy stage 2 started from
    # stage 2 started from a copy of stage 1's policy (the same files as 0.5.0's shipped ones), named by its path
    assert record["config"]["init_oft"] and stage1["setting"] == record["setting"] == "none"
    assert record["config"]["learning_rate"] < stage1["config"]["learning_rate"]
    assert (where / "training_curve_stage1.csv").read_text().count("\n") == 1 + stage1["training"]["steps"]
    assert json.loads((where / "demos.json").read_text())["config"]["task_episodes"] == record["config"]["task_episodes"]
    vla, processor = load_vla(where)
    assert vla.oft.proprio_dim == len(STATE_FIELDS) and vla.oft.proprio_slots is True
    assert vla.vision_backbone.get_num_images_in_input() == 2 and DATASET in vla.norm_stats
    inputs = sample_inputs(processor, "close the drawer", 1, 224, 0, num_images=2, proprio_dim=len(STATE_FIELDS))
    with torch.no_grad():
        chunk = np.asarray(vla.predict_action(**inputs, unnorm_key=DATASET, do_sample=False)[0])
    assert chunk.reshape(-1, 7).shape == (vla.oft.num_actions_chunk, 7) and np.isfinite(chunk).all()


@needs_metaworld
@pytest.mark.slow
def test_the_shipped_policy_closes_the_drawer_on_held_out_seeds() -> None:
    """Two test episodes of drawer-close (50 of 50 in its recipe's test run), closed loop in a spawned worker (the
    suite may have imported tensorflow here, which OSMesa's mujoco must not meet)."""
    assert MISSING is None
    from prismatic_tr.policy.bundled import bundled_metaworld_policy_dir
    from prismatic_tr.policy.metaworld_recipe import DATASET

    with MetaWorldWorkers(bundled_metaworld_policy_dir(), 1) as workers:
        outcomes = workers.run(["none"], ["drawer-close-v3"], "test", 2, DATASET, batch_size=2)["none"]
    assert [o.outcome for o in outcomes["drawer-close-v3"]] == ["success", "success"]


@needs_metaworld
@pytest.mark.slow
def test_one_command_trains_chooses_and_tests_then_the_table_runs_the_same_episodes(tmp_path: Path) -> None:
    """Demonstrations (1 reach episode at 64 px) -> stage 1: 2 training steps, 2 candidates chosen on 1 validation
    episode -> stage 2 from that policy on demonstrations of its own: 2 steps, chosen again -> 1 test episode, every
    closed loop in a spawned child; the same command again runs nothing; then eval_metaworld.py on the chosen
    checkpoint runs the same test episode unreduced (the same outcome) and with a vision cut (fewer tokens); then a
    fine-tune under a setting on on-policy episodes (the policy drives reduced, labels unreduced)."""
    assert MISSING is None
    pytest.importorskip("tensorflow_datasets")
    base = write_tiny_base(tmp_path / "base")
    out, env = tmp_path / "run", {**os.environ, "PYTHONPATH": str(ROOT)}
    flags = ["--output_dir", str(out), "--base_policy", str(base), "--tasks", "[reach-v3]", "--episodes_per_task",
             "1", "--image_size", "64", "--max_steps", "2", "--save_steps", "1", "--batch_size", "2",
             "--lr_warmup_steps", "1", "--select_episodes", "1", "--test_episodes", "1", "--eval_batch_size", "1",
             "--refine.max_steps", "2", "--refine.save_steps", "2", "--refine.episodes_per_task", "1",
             "--refine.task_episodes", "{}", "--refine.lr_warmup_steps", "1",
             "--install_dir", str(tmp_path / "installed"), "--progress", "false"]
    run = subprocess.run([sys.executable, str(ROOT / "vla_scripts" / "train_metaworld_policy.py"), *flags],
                         capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "test reach-v3" in run.stdout and "test mean over 1 tasks" in run.stdout
    record = json.loads((out / "evaluation.json").read_text())
    first, second = record["stages"]["stage1"], record["stages"]["stage2"]
    assert record["demonstrations"]["tasks"]["reach-v3"]["written"] == 1
    assert [c["step"] for c in first["selection"]["candidates"]] == [1, 2]
    assert first["selection"]["split"] == "validation"
    assert record["selection"] == second["selection"] and record["selection"]["rule"] == "the last step's checkpoint"
    assert first["evaluation"] == {} and second["evaluation"] == {}   # only the final policy is tested
    assert first["base_policy"] == record["base_policy"] == str(base)
    assert second["base_policy"] == first["policy"] == str(out / "stage1" / "policy")   # stage 2 starts there
    assert second["config"]["learning_rate"] == 2e-4 and record["training"]["stage_steps"] == [2, 2]
    test = record["evaluation"]["test"]
    assert list(test["tasks"]) == ["reach-v3"] and test["tasks"]["reach-v3"]["seeds"] == [3_000_000, 3_000_000]
    for stage in ("stage1", "stage2"):
        assert (out / stage / "training_curve.csv").read_text().count("\n") == 3
    chosen = Path(record["policy"])
    assert chosen == out / "policy" and Path(record["checkpoint"]).parent == out / "stage2" / "checkpoints"
    assert (chosen / "action_head--latest_checkpoint.pt").is_file()
    assert json.loads((chosen / "config.json").read_text())["oft"]["proprio_slots"] is True   # the recipe's default
    installed = tmp_path / "installed"   # --install_dir: the chosen checkpoint and the run's records
    assert (installed / "model.safetensors").read_bytes() == (chosen / "model.safetensors").read_bytes()
    assert json.loads((installed / "evaluation.json").read_text()) == record
    for name in ("training_curve_stage1.csv", "training_curve_stage2.csv", "demos_stage1.json", "demos_stage2.json"):
        assert (installed / name).is_file(), name

    # the same command again: both stages and the test were finished, so nothing runs and the record stays
    again = subprocess.run([sys.executable, str(ROOT / "vla_scripts" / "train_metaworld_policy.py"), *flags],
                           capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.count("not run again") == 2
    assert json.loads((out / "evaluation.json").read_text())["evaluation"] == record["evaluation"]

    table = tmp_path / "table"
    flags = ["--vla_path", str(chosen), "--settings", "[none,vision:diverse:0.5@0.25]", "--tasks", "[reach-v3]",
             "--episodes", "1", "--image_size", "64", "--timing_runs", "1", "--output_dir", str(table),
             "--progress", "false"]
    run = subprocess.run([sys.executable, str(ROOT / "vla_scripts" / "eval_metaworld.py"), *flags],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    records = json.loads((table / "results.json").read_text())["records"]
    assert [r["setting"] for r in records] == ["none", "vision:diverse:0.5@0.25"]
    ours, theirs = records[0]["tasks"]["reach-v3"], test["tasks"]["reach-v3"]
    assert (ours["successes"], ours["mean_steps"]) == (theirs["successes"], theirs["mean_steps"])
    assert records[1]["num_patches"] < records[0]["num_patches"] and records[1]["predict_action_ms"] > 0
    assert (table / "results.csv").read_text().count("\n") == 1 + 2 * 2
    meta = json.loads((table / "results.json").read_text())["meta"]
    assert meta["episode_workers"] == 2 and meta["episode_worker_threads"] >= 1 and meta["dtype"] == "float32"
    assert meta["trained_with"] == "none" and meta["started_from"] == str(base)

    # the unreduced episode again in this process (one thread, as each of the two workers had): the same outcome
    alone = tmp_path / "alone"
    one = [*flags]
    one[one.index("--output_dir") + 1], one[one.index("--timing_runs") + 1] = str(alone), "0"
    one[one.index("--settings") + 1] = "[none]"
    run = subprocess.run([sys.executable, str(ROOT / "vla_scripts" / "eval_metaworld.py"), *one, "--workers", "1",
                          "--num_threads", str(meta["episode_worker_threads"])],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    assert [r["tasks"] for r in json.loads((alone / "results.json").read_text())["records"]] == [records[0]["tasks"]]

    # the table again with a setting added: the journaled jobs reused, only the new one run
    flags[flags.index("--output_dir") + 1] = str(table)
    flags[flags.index("--settings") + 1] = "[none,vision:diverse:0.5@0.25,diverse:0.5]"
    run = subprocess.run([sys.executable, str(ROOT / "vla_scripts" / "eval_metaworld.py"), *flags, "--workers", "1"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "resuming: 2 of 3 (setting, task) jobs" in run.stdout
    resumed = json.loads((table / "results.json").read_text())
    assert [r["tasks"] for r in resumed["records"][:2]] == [r["tasks"] for r in records]
    assert resumed["records"][2]["setting"] == "diverse:0.5" and resumed["meta"]["journal"]["jobs_reused"] == 2
    assert (table / "episodes.jsonl").read_text().count("\n") == 1 + 3
    # (another episode count is refused: tests/policy/test_job_journal.py, without a process of its own)

    # fine-tuning for a setting on on-policy episodes: the policy drives with the setting and labels without it at
    # every plan (its chunk there); from the policy, its statistics kept, the setting attached in the test episodes;
    # as a LoRA adapter (--lora_rank: the tabletop adapters' trainer), its last checkpoint kept and shipped as the
    # adapters are (the whole-policy fine-tune from --init_oft under a setting is the OFT recipe's train_policy,
    # run by the tabletop OFT fine-tune's slow test)
    tuned, shipped = tmp_path / "tuned", tmp_path / "adapters" / "metaworld-vision"
    flags = ["--output_dir", str(tuned), "--init_oft", str(chosen), "--setting", "vision:diverse:0.5@0.25",
             "--onpolicy_episodes", "1", "--execute_steps", "4", "--tasks", "[reach-v3]", "--image_size", "64",
             "--lora_rank", "4", "--max_steps", "2", "--save_steps", "1", "--batch_size", "2", "--lr_warmup_steps",
             "0", "--select_episodes", "0", "--test_episodes", "1", "--install_dir", str(shipped), "--progress", "false"]
    run = subprocess.run([sys.executable, str(ROOT / "vla_scripts" / "train_metaworld_policy.py"), *flags],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    record = json.loads((tuned / "evaluation.json").read_text())
    assert record["setting"] == "vision:diverse:0.5@0.25" and record["base_policy"] == str(chosen)
    assert record["evaluation"]["test"]["setting"] == "vision:diverse:0.5@0.25"
    assert record["selection"]["rule"] == "the last step's checkpoint"
    data = record["demonstrations"]
    assert data["job"]["setting"] == "vision:diverse:0.5@0.25" and data["job"]["checkpoint"] == str(chosen)
    reach = data["tasks"]["reach-v3"]
    assert reach["episodes"] == 1 and reach["labelled_steps"] == -(-reach["steps"] // 4)
    from prismatic_tr.data.oft import OFTChunkSource

    source = OFTChunkSource(tuned / "data", "metaworld_mt10", num_images=2)
    assert source.chunk_key == "action_chunk"
    assert sum(1 for _ in source.rlds.step_dataset()) == reach["labelled_steps"]
    assert record["training"]["lora_rank"] == 4 and sorted(record["training"]["checkpoints"]) == ["1", "2"]
    assert record["selection"]["candidates"] == [record["training"]["checkpoints"]["2"]] == [record["checkpoint"]]
    assert {"adapter_config.json", "adapter_model.safetensors", "token_reduction.json", "record.json",
            "evaluation.json", "action_head--latest_checkpoint.pt"} <= {f.name for f in shipped.iterdir()}
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.adapters import load_adapted_policy

    adapted, _ = load_adapted_policy(shipped, base=chosen, apply_reduction=False)
    merged, _ = load_vla(record["checkpoint"])   # the checkpoint chosen and tested: the same weights (float16 LoRA)
    theirs = merged.state_dict()
    for name, weight in adapted.state_dict().items():
        torch.testing.assert_close(weight, theirs[name], atol=2e-3, rtol=0, msg=name)


# ---------------------------------------------------------------- the failure diagnosis's pure parts (no metaworld)


def synthetic_trace(task: str, tcp_path: list, obj_path: list, goal=(0.3, 0.0, 0.1), outcome: str = "timeout",
                    seed: int = 0):
    """A trace whose hand (tcp) and object go through the given points (one per step), the goal fixed."""
    from prismatic_tr.policy.metaworld_diagnosis import EpisodeTrace

    raw = np.zeros((len(tcp_path), 39))
    raw[:, 4:7], raw[:, -3:] = obj_path, goal
    return EpisodeTrace(task, seed, outcome, raw, np.asarray(tcp_path, dtype=float))


START, PUCK, HALF = (0.0, -0.2, 0.3), (0.0, 0.0, 0.02), (0.2, 0.0, 0.02)


@pytest.mark.parametrize("task, tcp, obj, outcome, phase", [
    ("push-v3", [START, (0.0, -0.1, 0.2)], [PUCK, PUCK], "timeout", "none"),
    ("push-v3", [START, PUCK], [PUCK, PUCK], "timeout", "approach"),
    ("push-v3", [START, PUCK], [PUCK, (0.0, 0.02, 0.02)], "timeout", "contact"),
    ("push-v3", [START, HALF], [PUCK, HALF], "timeout", "transport"),
    ("pick-place-v3", [START, HALF], [PUCK, HALF], "timeout", "contact"),        # slid, never lifted
    ("pick-place-v3", [START, (0.0, 0.0, 0.08)], [PUCK, (0.0, 0.0, 0.08)], "timeout", "lift"),
    ("pick-place-v3", [START, (0.2, 0.0, 0.08)], [PUCK, (0.2, 0.0, 0.08)], "timeout", "transport"),
    ("reach-v3", [START, (0.0, -0.2, 0.2)], [PUCK, PUCK], "timeout", "none"),
    ("reach-v3", [START, (0.28, 0.0, 0.12)], [PUCK, PUCK], "timeout", "transport"),
    ("reach-v3", [START, START], [PUCK, PUCK], "success", "success"),
])
def test_diagnosis_names_the_phase_an_episode_reached(task, tcp, obj, outcome, phase):
    from prismatic_tr.policy.metaworld_diagnosis import episode_row, phase_reached

    trace = synthetic_trace(task, tcp, obj, outcome=outcome)
    assert phase_reached(trace) == phase
    row = episode_row(trace)
    assert row["phase"] == phase and row["steps"] == 1


def test_diagnosis_summary_says_whether_the_hand_follows_the_goal():
    from prismatic_tr.policy.metaworld_diagnosis import summarise

    goals = [(0.1 * i, 0.6 + 0.02 * i, 0.1) for i in range(4)]
    follows = [synthetic_trace("reach-v3", [START, g], [PUCK, PUCK], goal=g, seed=i) for i, g in enumerate(goals)]
    same = [synthetic_trace("reach-v3", [START, (0.0, 0.6, 0.1)], [PUCK, PUCK], goal=g, seed=i)
            for i, g in enumerate(goals)]
    record = summarise(same, follows)
    assert record["task"] == "reach-v3"
    assert record["expert"]["follows_goal"]["x"]["correlation"] == pytest.approx(1.0)
    assert record["policy"]["follows_goal"]["x"]["hand_spread_m"] == 0.0
    assert record["policy"]["phases"]["transport"] == 4 and record["policy"]["successes"] == 0
    json.dumps(record)   # JSON-ready


def test_the_failure_diagnosis_refuses_a_bad_setting_before_any_work(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """``benchmarks/metaworld_failures.py --setting``: a spec the grammar refuses exits 2 naming it, before the policy
    loads or anything is written; the library call refuses it before loading too."""
    from helpers.benchmark_scripts import load_benchmark

    from prismatic_tr.policy.metaworld_diagnosis import diagnose_failures

    script = load_benchmark("metaworld_failures")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--tasks", "reach-v3", "--episodes", "2", "--setting", "bogus:0.5", "--output_dir", str(out)])
    assert exit_info.value.code == 2
    assert "--setting 'bogus:0.5': unknown reduction method 'bogus'" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ValueError, match="keep_ratio"):
        next(diagnose_failures(tmp_path / "no_policy", ["reach-v3"], 2, "cmd", "diverse_merge:1.5"))
