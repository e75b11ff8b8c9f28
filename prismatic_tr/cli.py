"""What the command-line programs (``vla_scripts/``) share: draccus parsing with clear errors and a description in ``--help``,
one spelling rule for list flags, exit statuses, and thread settings.

List flags take any of ``--methods a b``, ``--methods a,b``, ``--methods=a,b`` and the YAML list
``--methods "[a,b]"``: :func:`normalize_list_flags` rewrites the first three into the form the parser
expects (a YAML list for draccus, separate words for argparse ``nargs="+"``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

T = TypeVar("T")
EXIT_BAD_INPUT = 2  # a flag or input was rejected before any work
EXIT_NOISY = 3  # benchmark.py --strict: the run finished but rows were flagged as noisy


class BadInputError(ValueError):
    """Input a command cannot use, found by the library before any work (a checkpoint that does not load, a missing
    dataset, a flag that does not fit the model): the command prints it in one line and exits with
    :data:`EXIT_BAD_INPUT`."""


def check_int_flag(name: str, value: Any, low: int) -> None:
    """ValueError ``--<name> <value> is not allowed; use an integer >= <low>`` unless ``value`` is such an integer
    (a bool is not)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"--{name} {value!r} is not allowed; use an integer >= {low}")


def value_error_in(exc: BaseException) -> ValueError | None:
    """The ValueError that ``exc`` is or wraps (draccus wraps errors raised in ``__post_init__``), or None."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ValueError):
        cause = cause.__cause__ or cause.__context__
    return cause


# ---------------------------------------------------------------- list flags


def split_list_values(tokens: Sequence[str]) -> list[str]:
    """The items of a list flag: separate words, comma-separated words, or one YAML list (``"[a, b]"``)."""
    if len(tokens) == 1 and tokens[0].strip().startswith("["):
        import yaml

        try:
            parsed = yaml.safe_load(tokens[0])
        except yaml.YAMLError as err:
            raise ValueError(f"{tokens[0]!r} is not a YAML list: {err}") from None
        if not isinstance(parsed, list):
            raise ValueError(f"{tokens[0]!r} is not a YAML list")
        return [str(v) for v in parsed]
    return [piece.strip() for token in tokens for piece in token.split(",") if piece.strip()]


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)  # a negative number is a value, not a flag
    except ValueError:
        return True
    return False


def normalize_list_flags(argv: Sequence[str], list_flags: Iterable[str],
                         style: Literal["yaml", "words"] = "yaml") -> list[str]:
    """Rewrite the values of every ``--<name>`` in ``list_flags`` (names without dashes) into one spelling.

    ``style="yaml"``: one token ``[a,b]`` (draccus); ``style="words"``: separate tokens (argparse ``nargs``).
    A flag given without any value is left alone for the parser to report.
    """
    names = set(list_flags)
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, eq, inline = token.partition("=")
        if not (flag.startswith("--") and flag[2:] in names):
            out.append(token)
            i += 1
            continue
        values = [inline] if eq else []
        i += 1
        if not eq:
            while i < len(argv) and not _is_flag(argv[i]):
                values.append(argv[i])
                i += 1
        if not values:
            out.append(flag)
            continue
        items = split_list_values(values)
        out += [flag, "[" + ",".join(items) + "]"] if style == "yaml" else [flag, *items]
    return out


def _is_list_type(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_is_list_type(arg) for arg in typing.get_args(tp))
    return False


def list_fields(config_class: type, prefix: str = "") -> list[str]:
    """Dotted names of the list-typed fields of a config dataclass, nested dataclasses included."""
    hints = typing.get_type_hints(config_class)
    names: list[str] = []
    for f in dataclasses.fields(config_class):
        tp = hints.get(f.name, f.type)
        if _is_list_type(tp):
            names.append(prefix + f.name)
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            names += list_fields(tp, prefix + f.name + ".")
    return names


# ---------------------------------------------------------------- draccus


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description (a script's docstring) as written."""


def _draccus_parser(config_class: type, prog: str | None, description: str | None) -> Any:
    from draccus.argparsing import ArgumentParser
    from draccus.help_formatter import SimpleHelpFormatter

    formatter = type("ScriptHelpFormatter", (_HelpFormatter, SimpleHelpFormatter), {})
    parser = ArgumentParser(config_class=config_class, formatter_class=formatter, prog=prog,
                                    description=description)
    # draccus 0.8 adds "--<nested>" (config file of a nested dataclass) twice; argparse keeps only the last
    # for parsing but both in the help. Show each option once: only what the parser really uses.
    inner = parser.parser
    for group in inner._action_groups:
        group._group_actions = [a for a in group._group_actions if a in inner._actions]
    # argparse formats help text with "%": a literal one in a field comment ("10 %") would break --help.
    for action in inner._actions:
        if isinstance(action.help, str) and "%" in action.help and "%(" not in action.help:
            action.help = action.help.replace("%", "%%")
    return parser


def parse_config(config_class: type[T], args: Sequence[str] | None, prog: str | None = None,
                 description: str | None = None) -> T:
    """Parse flags into ``config_class``; any bad value comes out as a ``ValueError`` saying what is wrong.

    List fields accept every spelling of :func:`normalize_list_flags`; ``--help`` shows ``description``.
    """
    argv = list(sys.argv[1:] if args is None else args)
    argv = normalize_list_flags(argv, list_fields(config_class), style="yaml")
    parser = _draccus_parser(config_class, prog, description)
    try:
        return parser.parse_args(argv)
    except ValueError:
        raise
    except Exception as exc:  # draccus' own errors wrap the ValueError of __post_init__
        inner = value_error_in(exc)
        raise (inner if inner is not None else ValueError(str(exc))) from None


def report_bad_input(prog: str, err: BaseException) -> int:
    """Print ``{prog}: error: {err}`` to stderr and return :data:`EXIT_BAD_INPUT`."""
    print(f"{prog}: error: {err}", file=sys.stderr)
    return EXIT_BAD_INPUT


def check_checkpoint_dir(flag: str, path: str | Path) -> None:
    """``ValueError`` naming ``--flag`` when ``path`` holds no ``config.json`` (no checkpoint directory)."""
    if not (Path(path) / "config.json").is_file():
        raise ValueError(f"--{flag} {str(path)!r} is not a checkpoint directory (no config.json)")


def parse_config_or_exit(config_class: type[T], args: Sequence[str] | None, prog: str,
                         description: str | None = None) -> T:
    """:func:`parse_config`, printing ``{prog}: error: ...`` and exiting with status 2 on a bad value."""
    try:
        return parse_config(config_class, args, prog, description)
    except ValueError as err:
        raise SystemExit(report_bad_input(prog, err)) from None


# ---------------------------------------------------------------- argparse


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args`` after :func:`normalize_list_flags` on every ``nargs="+"/"*"`` flag; a bad list
    value is a parser error (exit 2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    names = [opt[2:] for a in parser._actions if a.nargs in ("+", "*") for opt in a.option_strings
             if opt.startswith("--")]
    try:
        argv = normalize_list_flags(argv, names, style="words")
    except ValueError as err:
        parser.error(str(err))
    return parser.parse_args(argv)


def set_threads(parser: argparse.ArgumentParser, threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` when given; ``--threads`` below 1 is a parser error (exit 2)."""
    if threads is None:
        return
    if threads < 1:
        parser.error(f"--threads {threads}: must be >= 1")
    import torch

    torch.set_num_threads(threads)


def add_flag(parser: argparse.ArgumentParser, name: str, **kwargs: object) -> None:
    """Add ``--name`` with both the dash and the underscore spelling."""
    spellings = {f"--{name.replace('_', '-')}", f"--{name.replace('-', '_')}"}
    parser.add_argument(*sorted(spellings), dest=name.replace("-", "_"), **kwargs)  # type: ignore[arg-type]


def run_command(parse: Callable[[Sequence[str] | None], T], run: Callable[[T], Any],
                argv: Sequence[str] | None = None) -> int:
    """The body of a console-script entry point: parse ``argv`` (``sys.argv[1:]`` when None; a bad value exits
    with status 2), run, and return 0, or ``run``'s own status when it returns an int."""
    status = run(parse(argv))
    return status if isinstance(status, int) and not isinstance(status, bool) else 0


def print_json(result: dict[str, Any], output: str | Path | None = None) -> str:
    """Print ``result`` as indented JSON and, when ``output`` is given, write it there too (parents made); returns the
    text. What the one-object measurements (``benchmarks/*.py``, ``load_test.py``) print and save."""
    text = json.dumps(result, indent=2)
    print(text)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(text + "\n")
    return text


def command_line(prog: str, argv: Sequence[str] | None = None) -> str:
    """``python <prog> <flags>`` (``argv``, default ``sys.argv[1:]``): how a results file names the command that
    made it."""
    return " ".join(["python", prog, *(sys.argv[1:] if argv is None else argv)])
