"""The configs of ``vla_scripts/deploy.py`` and ``vla_scripts/load_test.py`` (draccus dataclasses), checked before
any model is built, and the two programs' bodies.

No ``from __future__ import annotations`` here: draccus 0.8 (OpenVLA's pins) needs the field types as objects.
"""

import datetime
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prismatic_tr.cli import check_int_flag, print_json

from .config import ServeLimits

DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class DeployConfig:
    # fmt: off
    vla_path: str | None = None             # checkpoint directory (default: the bundled tabletop policy)
    adapter: str | None = None              # LoRA adapter merged in first (shipped name or directory), with its setting
    preset: str | None = None               # serve a random-weight preset instead (tiny, policy, cpu-bench): load tests
    setting: str = "own"                    # reduction spec (vision:diverse:0.1@0.25, ...), none, or own (the model's)
    dtype: str = "auto"                     # auto (bf16 on GPU / CPUs with bf16 hardware, else float32) | float32 | ...
    device: str = "auto"                    # auto | cpu | cuda | cuda:N
    host: str = "127.0.0.1"                 # 0.0.0.0 to serve other machines (OpenVLA's default)
    port: int = 8000                        # OpenVLA's default port
    max_batch: int = 16                     # requests stacked into one predict_action at most
    max_wait_ms: float = 10.0               # how long a free model waits for more requests (never for a lone client)
    max_body_bytes: int = 8388608           # larger bodies get 413
    min_image_side: int = 16                # images are uint8 (H, W, 3) with both sides in [min, max]
    max_image_side: int = 1024
    max_instruction_chars: int = 512
    warmup: bool = True                     # run one request before accepting clients
    num_threads: int = 0                    # torch threads (0: torch's default)
    log_level: str = "info"                 # uvicorn's and the server's log level
    # fmt: on

    def __post_init__(self) -> None:
        self.limits()  # ValueError naming a bad limit
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"--port {self.port!r} is not allowed; use 0 to 65535")
        if self.dtype not in DTYPE_CHOICES:
            raise ValueError(f"--dtype {self.dtype!r} is not allowed; use one of {', '.join(DTYPE_CHOICES)}")
        check_int_flag("num_threads", self.num_threads, 0)
        if self.log_level not in ("critical", "error", "warning", "info", "debug"):
            raise ValueError(f"--log_level {self.log_level!r} is not allowed; use critical, error, warning, info or "
                             "debug")
        self._check_model()

    def _check_model(self) -> None:
        """ValueError for a source that cannot be served, before anything loads."""
        from prismatic_tr.vla import parse_setting

        if self.setting.strip() != "own":
            parse_setting(self.setting)
        if self.preset is not None:
            from prismatic_tr.models import PRESETS

            if self.vla_path is not None or self.adapter is not None:
                raise ValueError("--preset builds a random-weight model; give it without --vla_path and --adapter")
            if self.preset not in PRESETS:
                raise ValueError(f"--preset {self.preset!r} is not allowed; use one of {', '.join(PRESETS)}")
        if self.vla_path is not None and not (Path(self.vla_path) / "config.json").is_file():
            raise ValueError(f"--vla_path {self.vla_path!r} is not a checkpoint directory (no config.json)")
        if self.adapter is not None:
            from prismatic_tr.policy.adapters import adapter_dir

            adapter_dir(self.adapter)

    def limits(self) -> ServeLimits:
        return ServeLimits(self.max_batch, float(self.max_wait_ms), self.max_body_bytes, self.min_image_side,
                           self.max_image_side, self.max_instruction_chars)


def deploy(cfg: DeployConfig) -> None:
    """Load the policy, warm it up, serve until SIGTERM / SIGINT (requests in flight are answered first)."""
    import torch

    from prismatic_tr.serve import load_served_policy, run_server  # ImportError naming the serve extra

    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    policy = load_served_policy(cfg.vla_path, cfg.adapter, cfg.preset, cfg.setting, cfg.dtype, cfg.device)
    if cfg.warmup:
        policy.warm_up()
    info = policy.info()
    print(f"serving {info['model']} ({info['setting']}, {info['dtype']}, {info['visual_tokens']} visual tokens) on "
          f"http://{cfg.host}:{cfg.port}/act", file=sys.stderr, flush=True)
    run_server(policy, cfg.limits(), cfg.host, cfg.port, cfg.log_level)


@dataclass
class LoadTestCommand:
    # fmt: off
    url: str = "http://127.0.0.1:8000"      # the server (deploy.py)
    clients: int = 4                        # concurrent clients, each waiting for its answer before the next request
    requests: int = 200                     # requests in all (the run also stops after --duration_s)
    duration_s: float = 60.0                # seconds of load at most
    distinct: int = 32                      # distinct tabletop frames at most, each checked against its answer alone
    candidates: int | None = None           # frames probed alone to pick those with differing answers (default --distinct)
    require_distinct: bool = False          # refuse a run where all answers are equal (a mix-up would go unseen)
    timeout_s: float = 120.0                # per request
    atol: float = 1e-6                      # an answer differing from its reference by more is "mismatched"
    soak: bool = False                      # 120 s (or --duration_s), a bad request every --bad_every, no request cap
    bad_every: int = 50                     # with --soak: every K-th request is malformed and must get a 4xx
    unnorm_key: str | None = None           # sent with every request (default: none, the model's only key)
    output: str | None = None               # write the report as JSON here too
    # fmt: on

    def __post_init__(self) -> None:
        self.to_config([])  # ValueError naming a bad value, before any request is sent

    def to_config(self, argv: list[str]) -> Any:
        """The :class:`prismatic_tr.serve.loadtest.LoadTestConfig` of these flags (``argv``: which were given)."""
        from .loadtest import LoadTestConfig

        given = {a.split("=")[0].lstrip("-") for a in argv if a.startswith("--")}
        duration = self.duration_s if (not self.soak or "duration_s" in given) else 120.0
        requests = self.requests if (not self.soak or "requests" in given) else 10**9
        return LoadTestConfig(self.url.rstrip("/"), self.clients, requests, duration, self.distinct,
                              self.timeout_s, self.atol, self.bad_every if self.soak else 0, self.unnorm_key,
                              candidates=self.candidates, require_distinct=self.require_distinct)


def load_test(cfg: LoadTestCommand, argv: list[str]) -> int:
    """Run the load test, print the report (and write ``--output``); status 1 when anything was lost,
    mismatched, answered wrongly, or a bad request was not refused with a 4xx."""
    from prismatic_tr.serve.loadtest import run_load_test

    report = run_load_test(cfg.to_config(argv))
    report["command"] = " ".join(["python", "vla_scripts/load_test.py", *argv])
    report["date_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    print_json(report, cfg.output)
    if not report["mixup_detectable"]:
        print(f"WARNING: all {report['probed_observations']} probed observations got the same action, so "
              "'mismatched' cannot catch a mixed-up answer (--require_distinct true refuses such a run)",
              file=sys.stderr)
    failed = report["lost"] or report["mismatched"] or report["errors"] or report["bad_not_4xx"]
    return 1 if failed else 0
