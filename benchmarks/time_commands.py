"""Time the README's two commands as a new user runs them: each in its own fresh clone of this checkout's HEAD (so
each makes its ``.venv`` from scratch, with uv's download cache as this machine has it), one after the other:

    python benchmarks/time_commands.py --output benchmarks/results/commands/avx2.json

The clones go beside the checkout (``../prismatic_tr-timing-<command>``, so that ``../shared/reference`` is found as
from the checkout) and are removed after. The record: per command its wall seconds, the seconds until
``setup_env.sh`` reported the install, its exit status and last lines; the machine (CPU model and features), the
dtype ``--dtype auto`` picks there, the commit and the date. Each command's whole output goes to
``<output>.<name>.log``. Run it on a quiet machine: nothing else may run while it times.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.bench.measure.devices import fast_dtype, machine_info
from prismatic_tr.cli import parse_config_or_exit

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"benchmark": "bash scripts/benchmark.sh", "test": "bash scripts/test.sh"}  # the README's two
INSTALLED = "installed prismatic_tr["  # the line scripts/setup_env.sh prints once the environment is ready


@dataclass
class TimeCommandsConfig:
    output: Path = Path("benchmarks/results/commands/machine.json")  # the record (JSON); logs beside it
    commands: list[str] = field(default_factory=lambda: list(COMMANDS))  # which of: benchmark, test
    keep_clones: bool = False                  # leave the fresh clones in place after timing

    def __post_init__(self) -> None:
        for name in self.commands:
            if name not in COMMANDS:
                raise ValueError(f"--commands names {name!r}; allowed: {', '.join(COMMANDS)}")


def time_in_fresh_clone(name: str, log: Path, keep: bool) -> dict:
    clone = ROOT.parent / f"prismatic_tr-timing-{name}"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    start, install_s, tail = time.perf_counter(), None, []
    with log.open("w") as out, subprocess.Popen(COMMANDS[name], shell=True, cwd=clone, text=True,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        for line in proc.stdout:
            out.write(line)
            tail = (tail + [line.rstrip()])[-5:]
            if install_s is None and line.startswith(INSTALLED):
                install_s = round(time.perf_counter() - start, 1)
    wall_s = round(time.perf_counter() - start, 1)
    if not keep:
        shutil.rmtree(clone, ignore_errors=True)
    return {"name": name, "command": COMMANDS[name], "wall_s": wall_s, "install_s": install_s,
            "exit_status": proc.returncode, "last_lines": tail, "log": log.name}


def main(cfg: TimeCommandsConfig) -> int:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    cfg.output.parent.mkdir(parents=True, exist_ok=True)
    runs = []
    for name in cfg.commands:
        runs.append(time_in_fresh_clone(name, cfg.output.with_suffix(f".{name}.log"), cfg.keep_clones))
        print(f"{runs[-1]['command']}: {runs[-1]['wall_s']:.0f} s (install {runs[-1]['install_s']} s), "
              f"exit {runs[-1]['exit_status']}", flush=True)
    record = {"command": "python benchmarks/time_commands.py " + " ".join(sys.argv[1:]), "commit": commit,
              "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"), "runs": runs,
              "dtype_auto": str(fast_dtype(torch.device("cpu"))).removeprefix("torch."), "machine": machine_info()}
    cfg.output.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {cfg.output}")
    return max(r["exit_status"] for r in runs)


if __name__ == "__main__":
    raise SystemExit(main(parse_config_or_exit(TimeCommandsConfig, None, "time_commands.py", description=__doc__)))
