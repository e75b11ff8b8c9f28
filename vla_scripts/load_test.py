"""Load-test a deploy server over real HTTP: throughput, latency, errors, and every answer checked.

Each of ``--candidates`` observations (tabletop frames of different episodes; default ``--distinct``) is first sent
alone and its answer kept, and up to ``--distinct`` of them whose answers differ are kept; then ``--clients``
concurrent clients send them until ``--requests`` are sent or ``--duration_s`` passed, and every answer is compared
with its own reference (a mixed-up answer counts as mismatched). When every observation gets the same answer (a
random-weight preset) a mix-up cannot be seen: the report says ``mixup_detectable: false``, and
``--require_distinct true`` refuses the run (exit 2). Prints a JSON report: actions/s, p50 / p95 / p99 latency, errors, lost, mismatched, the server's mean batch size and memory.
``--soak true``: 120 s (``--duration_s``) with a malformed request every ``--bad_every``, each of which must be
answered 4xx. Exits 1 when a request was lost, mismatched or answered wrongly, else 0.

    python vla_scripts/deploy.py --preset cpu-bench --port 8000 &      # then:
    python vla_scripts/load_test.py --clients 16 --requests 160
    python vla_scripts/load_test.py --soak true --clients 16 --bad_every 50 --output outputs/soak.json
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from prismatic_tr.cli import parse_config_or_exit
from prismatic_tr.serve.commands import LoadTestCommand, load_test

PROG = "load_test.py"


def parse_config(args: Sequence[str] | None = None) -> LoadTestCommand:
    """Parse flags; on a bad value print ``load_test.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(LoadTestCommand, args, PROG, description=__doc__)


def cli(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the load test, exit status (0: every answer right)."""
    args = list(sys.argv[1:] if argv is None else argv)
    cfg = parse_config(args)
    try:
        return load_test(cfg, args)
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(cli())
