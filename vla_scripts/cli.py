"""What the command-line programs share: draccus parsing with clear errors, and thread settings."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
EXIT_BAD_INPUT = 2


def value_error_in(exc: BaseException) -> ValueError | None:
    """The ValueError that ``exc`` is or wraps (draccus wraps errors raised in ``__post_init__``), or None."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ValueError):
        cause = cause.__cause__ or cause.__context__
    return cause


def parse_config(config_class: type[T], args: Sequence[str] | None) -> T:
    """Parse flags into ``config_class``; any bad value comes out as a ``ValueError`` saying what is wrong."""
    import draccus

    try:
        return draccus.parse(config_class=config_class, args=list(args) if args is not None else None)
    except ValueError:
        raise
    except Exception as exc:  # draccus' own errors wrap the ValueError of __post_init__
        inner = value_error_in(exc)
        raise (inner if inner is not None else ValueError(str(exc))) from None


def parse_config_or_exit(config_class: type[T], args: Sequence[str] | None, prog: str) -> T:
    """:func:`parse_config`, printing ``{prog}: error: ...`` and exiting with status 2 on a bad value."""
    try:
        return parse_config(config_class, args)
    except ValueError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None


def set_threads(parser: argparse.ArgumentParser, threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` when given; ``--threads`` below 1 is a parser error (exit 2)."""
    if threads is None:
        return
    if threads < 1:
        parser.error(f"--threads {threads}: must be >= 1")
    import torch

    torch.set_num_threads(threads)
