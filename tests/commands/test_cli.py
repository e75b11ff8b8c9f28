"""What every program in vla_scripts/ shares: list-flag spellings, a description in --help, one listing per
option, ``<prog>: error: <reason>`` with status 2 before any model is built."""

# No "from __future__ import annotations": draccus 0.3 (OpenVLA's pins) needs real field types.

import dataclasses
import importlib

import pytest

from prismatic_tr import cli

# ---------------------------------------------------------------- the list-flag normaliser


@pytest.mark.parametrize(("tokens", "items"), [
    (["a", "b"], ["a", "b"]),
    (["a,b"], ["a", "b"]),
    (["a, b", "c"], ["a", "b", "c"]),
    (["[a, b]"], ["a", "b"]),
    (["[0.75,0.5]"], ["0.75", "0.5"]),
    (["[]"], []),
    (["3"], ["3"]),
])
def test_split_list_values(tokens, items):
    assert cli.split_list_values(tokens) == items


@pytest.mark.parametrize(("argv", "yaml", "words"), [
    (["--m", "a", "b", "--n", "1"], ["--m", "[a,b]", "--n", "1"], ["--m", "a", "b", "--n", "1"]),
    (["--m", "a,b"], ["--m", "[a,b]"], ["--m", "a", "b"]),
    (["--m=a,b", "--x", "y"], ["--m", "[a,b]", "--x", "y"], ["--m", "a", "b", "--x", "y"]),
    (["--m", "[a,b]"], ["--m", "[a,b]"], ["--m", "a", "b"]),
    (["--m", "-1", "2"], ["--m", "[-1,2]"], ["--m", "-1", "2"]),  # negative numbers are values
    (["--m", "--n", "1"], ["--m", "--n", "1"], ["--m", "--n", "1"]),  # no value: left for the parser
    (["--mm", "a", "b"], ["--mm", "a", "b"], ["--mm", "a", "b"]),  # not a list flag
])
def test_normalize_list_flags(argv, yaml, words):
    assert cli.normalize_list_flags(argv, ["m"], style="yaml") == yaml
    assert cli.normalize_list_flags(argv, ["m"], style="words") == words


def test_bad_yaml_list_is_a_value_error():
    with pytest.raises(ValueError, match="YAML list"):
        cli.split_list_values(["[a, b"])


@dataclasses.dataclass
class _Inner:
    sizes: list[int] = dataclasses.field(default_factory=list)
    name: str = "x"


@dataclasses.dataclass
class _Outer:
    methods: list[str] = dataclasses.field(default_factory=list)
    loc: list[int] | None = None
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    ratio: float = 0.5


def test_list_fields_finds_optional_and_nested_lists():
    assert cli.list_fields(_Outer) == ["methods", "loc", "inner.sizes"]
    assert cli.parse_config(_Outer, ["--methods", "a", "b", "--loc", "1,2", "--inner.sizes", "3"]) == _Outer(
        ["a", "b"], [1, 2], _Inner([3]))


def test_list_fields_of_the_script_configs():
    from prismatic_tr.bench.vit.fidelity_sweep import EvalVitConfig
    from prismatic_tr.bench.vla.config import BenchmarkConfig

    assert cli.list_fields(BenchmarkConfig) == ["methods", "ratios", "settings", "adapters"]
    assert cli.list_fields(EvalVitConfig) == ["methods", "keep_ratios", "reduction_loc", "tome_r"]


# ---------------------------------------------------------------- every script: --help


SCRIPTS = {  # module -> text its --help must show (the first line of its docstring)
    "benchmark": "Benchmark one OpenVLA control step",
    "eval_vit": "Fidelity of in-backbone token reduction",
    "finetune": "LoRA fine-tuning of an OpenVLA-style model",
    "speed_test": "Speed test of a timm ViT",
    "sweep": "Sweep baseline vs token-reduced ViT",
    "calibrate": "Measure where token reduction pays",
    "train_policy": "Remake the bundled tabletop policy on the CPU, from nothing, in one command",
}


def _help(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    if name == "finetune":
        pytest.importorskip("peft")
    mod = importlib.import_module(f"vla_scripts.{name}")
    with pytest.raises(SystemExit) as exc:
        if hasattr(mod, "build_parser"):
            cli.parse_args(mod.build_parser(), ["--help"])
        elif name == "finetune":
            mod.parse(["--help"])
        else:
            mod.parse_config(["--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_help_describes_the_program_and_lists_each_option_once(name, capsys):
    text = _help(name, capsys)
    assert SCRIPTS[name] in text
    options = [line.split()[0] for line in text.splitlines() if line.startswith("  --")]
    assert len(options) == len(set(options)), sorted(o for o in options if options.count(o) > 1)


# ---------------------------------------------------------------- argparse scripts: list spellings, fail fast


@pytest.mark.parametrize("spelling", [["3", "6", "9"], ["3,6,9"], ["[3, 6, 9]"]])
def test_speed_test_list_flag_spellings(spelling):
    from vla_scripts import speed_test

    args = cli.parse_args(speed_test.build_parser(), ["--reduction_loc", *spelling, "--keep_ratio", "0.5"])
    assert speed_test.config_from_args(args).reduction_loc == [3, 6, 9]


@pytest.mark.parametrize("spelling", [["1", "2"], ["1,2"], ["[1,2]"]])
def test_sweep_and_calibrate_list_flag_spellings(spelling):
    from vla_scripts import calibrate, sweep

    for parser in (sweep.build_parser(), calibrate.build_parser()):
        args = cli.parse_args(parser, ["--batch_sizes", *spelling, "--input_sizes", "32"])
        assert args.batch_sizes == [1, 2] and args.input_sizes == [32]


@pytest.mark.parametrize(("name", "argv", "needle"), [
    ("speed_test", ["--model", "topk_deit_tiny_patch16_224", "--keep_ratio", "0.5", "--reduction_loc", "3,40"], "40"),
    ("speed_test", ["--model", "no_such_model_224"], "no_such_model_224"),
    ("sweep", ["--model", "topk_no_such_vit_224"], "no_such_vit"),
    ("sweep", ["--model", "tome_deit_tiny_patch16_224", "--r", "500", "--input_sizes", "32"], "r=500"),
    ("calibrate", ["--model", "topk_deit_tiny_patch16_224", "--reduction_loc", "3,40"], "40"),
    ("calibrate", ["--batch_sizes", "0"], "batch_sizes"),
    ("calibrate", ["--threads", "0"], "--threads"),
])
def test_argparse_scripts_fail_before_building_a_model(name, argv, needle, capsys, monkeypatch, tmp_path):
    mod = importlib.import_module(f"vla_scripts.{name}")
    for attr in ("run_speed_test", "run_sweep"):
        if hasattr(mod, attr):
            monkeypatch.setattr(mod, attr, lambda *a, **k: pytest.fail("a model was built for bad flags"))
    extra = {"sweep": ["--out_dir", str(tmp_path)], "calibrate": ["--out", str(tmp_path / "p.json")]}.get(name, [])
    with pytest.raises(SystemExit) as exc:
        mod.main(argv + extra)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"{name}.py: error:" in err and needle in err, err


def test_calibrate_rejects_a_directory_as_profile(capsys, monkeypatch, tmp_path):
    from vla_scripts import calibrate

    monkeypatch.setattr(calibrate, "run_sweep", lambda *a, **k: pytest.fail("a model was built for bad flags"))
    with pytest.raises(SystemExit) as exc:
        calibrate.main(["--model", "topk_deit_tiny_patch16_224", "--input_sizes", "32", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "is a directory" in capsys.readouterr().err


def test_entry_points_resolve_to_thin_functions() -> None:
    """Every ``[project.scripts]`` command names a function that exists (``module:function``)."""
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[2]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert {"prismatic-tr-benchmark", "prismatic-tr-eval-policy", "prismatic-tr-finetune",
            "prismatic-tr-train-policy"} <= set(scripts)
    for name, target in scripts.items():
        module, _, func = target.partition(":")
        if "finetune" in module:
            pytest.importorskip("peft")
        assert callable(getattr(importlib.import_module(module), func)), name


def test_scripts_import_the_library_never_each_other() -> None:
    """No program under vla_scripts/ or benchmarks/ imports a module of vla_scripts/; no code in
    benchmarks/results/."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for path in [*root.glob("vla_scripts/*.py"), *root.glob("benchmarks/**/*.py"), *root.glob("prismatic_tr/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(root)}: {n}" for n in names if n.split(".")[0] == "vla_scripts"]
    assert offenders == []
    assert list((root / "benchmarks" / "results").rglob("*.py")) == []
