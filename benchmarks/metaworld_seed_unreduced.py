"""Start a patched MetaWorld run's journal with a plain run's unreduced jobs (issue 48's experiments).

    python benchmarks/metaworld_seed_unreduced.py --output_dir OUT --patch '{"camera_budgets": [0.2, 0.8]}' \\
        --sources RUN_A/episodes.jsonl RUN_B/episodes.jsonl

A benchmark script that patches the model (``metaworld_camera_budget.py``, ``metaworld_merge_groups.py``,
``metaworld_projected_merge.py``) journals its patch in the run's identity, so it never reuses a plain run's jobs,
and would run the unreduced episodes again. Those patches change reduced calls only (each script's tests check that
an unreduced call is untouched), so a plain run's ``none`` jobs are that run's. This writes ``OUT/episodes.jsonl``:
the sources' identity (all must share it) with ``patch`` added, then every source's ``none`` jobs; the patched run
then reuses them and runs only its reduced jobs. Refuses (exit 2) sources of different identities, a source that
already has a patch, a ``--patch`` that is not a JSON object, and an ``OUT`` that already has a journal.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from prismatic_tr.policy.metaworld_eval import JOURNAL


def seed_journal(output_dir: Path, patch: dict, sources: list[Path]) -> int:
    """Write the journal (module docstring); returns how many unreduced jobs it holds. ValueError as the docstring."""
    if not isinstance(patch, dict) or not patch:
        raise ValueError(f"--patch {patch!r}: give a non-empty JSON object, as the patching script journals it")
    target = output_dir / JOURNAL
    if target.exists():
        raise ValueError(f"{target} exists: a journal is never overwritten")
    headers = [json.loads(path.read_text().splitlines()[0]) for path in sources]
    first = headers[0]["identity"]
    for path, header in zip(sources, headers, strict=True):
        if "patch" in header["identity"]:
            raise ValueError(f"{path}: a patched run's journal (patch {header['identity']['patch']}); give plain runs")
        if header["identity"] != first:
            raise ValueError(f"{path}: identity {header['identity']} is not {sources[0]}'s {first}")
    lines = [json.dumps({"identity": {**first, "patch": patch}, "started_utc": headers[0]["started_utc"]})]
    for path in sources:
        lines += [row for row in path.read_text().splitlines()[1:] if row and json.loads(row)["setting"] == "none"]
    output_dir.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="metaworld_seed_unreduced.py", description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--patch", required=True, help="the patch as the patching script journals it (JSON)")
    parser.add_argument("--sources", type=Path, nargs="+", required=True, help="plain runs' episodes.jsonl")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        patch = json.loads(args.patch)
    except json.JSONDecodeError as err:
        parser.error(f"--patch {args.patch!r}: not JSON ({err})")
    try:
        jobs = seed_journal(args.output_dir, patch, args.sources)
    except (ValueError, OSError) as err:   # a source's unreadable JSON too (JSONDecodeError is a ValueError)
        parser.error(str(err))
    print(f"{args.output_dir / JOURNAL}: {jobs} unreduced jobs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
