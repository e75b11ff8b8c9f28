"""``experiments`` and ``experiments.robot`` are namespace packages that merge with an OpenVLA checkout's.

OpenVLA keeps ``experiments/robot/openvla_utils.py``, ``robot_utils.py``, ... in folders without ``__init__.py``.
This package ships ``experiments/robot/token_reduction_utils.py`` in folders without ``__init__.py`` too, so
Python merges the two into one ``experiments.robot`` whichever comes first on ``sys.path`` (a regular package
of the same name would hide the checkout's modules, or be hidden by them).

Each case runs a fresh interpreter (this venv's python) on a throw-away checkout tree and imports OpenVLA's
modules and ours side by side: (a) run from the checkout's root, (b) with ``PYTHONPATH=checkout``. The package
is put on ``sys.path`` three ways: this repository's root (how a regular install lays it out), a wheel built
from this repository and unpacked (the release), and whatever install this venv has (skipped unless that is
this repository, e.g. CI's editable install).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECK = (
    "import json, experiments.robot.openvla_utils as o, experiments.robot.robot_utils as r\n"
    "import experiments.robot.token_reduction_utils as t\n"
    "print(json.dumps({'openvla': o.MARKER, 'robot': r.MARKER, 'ours': t.__file__,\n"
    "                  'api': t.apply_token_reduction_to_vla.__module__}))\n"
)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A minimal OpenVLA checkout: ``experiments/robot/*.py`` without ``__init__.py`` and an eval module."""
    root = tmp_path_factory.mktemp("openvla_checkout")
    robot = root / "experiments" / "robot"
    robot.mkdir(parents=True)
    (robot / "openvla_utils.py").write_text('MARKER = "openvla_utils of the checkout"\n')
    (robot / "robot_utils.py").write_text('MARKER = "robot_utils of the checkout"\n')
    (robot / "fake_eval.py").write_text(CHECK)
    return root


@pytest.fixture(scope="module")
def unpacked_wheel(tmp_path_factory) -> Path:
    """This repository built as a wheel (setuptools, as ``pip wheel`` / ``uv build`` would) and unpacked."""
    build_meta = pytest.importorskip("setuptools.build_meta")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("prismatic_tr", "experiments", "vla_scripts"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-c", f"import {build_meta.__name__} as b; b.build_wheel({str(dist)!r})"],
                   cwd=src, check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("*.whl")
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(target)
    assert "experiments/robot/token_reduction_utils.py" in names
    assert not [n for n in names if n.startswith("experiments/") and n.endswith("__init__.py")], names
    return target


def run_check(args: list[str], cwd: Path, pythonpath: list[Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"imports failed (cwd={cwd}, PYTHONPATH={pythonpath}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_both(checkout: Path, elsewhere: Path, package_path: list[Path], package_root: Path) -> None:
    runs = {
        "(a) python -m from the checkout's root": run_check(["-m", "experiments.robot.fake_eval"], checkout,
                                                            package_path),
        "(b) PYTHONPATH=checkout": run_check(["-c", CHECK], elsewhere, [checkout, *package_path]),
    }
    for case, seen in runs.items():
        assert seen["openvla"] == "openvla_utils of the checkout" and seen["robot"] == "robot_utils of the checkout", case
        assert Path(seen["ours"]).resolve().is_relative_to(package_root.resolve()), (case, seen["ours"])
        assert seen["api"] == "prismatic_tr.vla.api", case


@pytest.mark.slow
def test_source_tree_merges_with_an_openvla_checkout(checkout, tmp_path):
    check_both(checkout, tmp_path, [REPO], REPO)


@pytest.mark.slow
def test_built_wheel_merges_with_an_openvla_checkout(checkout, unpacked_wheel, tmp_path):
    check_both(checkout, tmp_path, [unpacked_wheel], unpacked_wheel)


@pytest.mark.slow
def test_installed_package_merges_with_an_openvla_checkout(checkout, tmp_path):
    """This venv's own install (editable in CI); skipped when it is another checkout's."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    where = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('prismatic_tr').origin)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    origin = Path(where.stdout.strip()) if where.returncode == 0 else None
    if origin is None or not origin.resolve().is_relative_to(REPO.resolve()):
        pytest.skip(f"the installed prismatic_tr ({origin}) is not this checkout's; `uv pip install -e .` tests it")
    # A stale editable install (made while experiments/ still had __init__.py) fails here: reinstall it.
    check_both(checkout, tmp_path, [], REPO)
