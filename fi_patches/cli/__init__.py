"""``python -m fi_patches``: the command line. Library code logs; only the CLI prints."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from fi_patches.cli import doctor, hook, pins, precompile, tune, validate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fi_patches", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="show fi_patches' log")
    commands = parser.add_subparsers(dest="command", required=True)
    doctor.register(commands)
    hook.register(commands)
    pins.register(commands)
    precompile.register(commands)
    tune.register(commands)
    validate.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``doctor | head``): stop quietly, as a tool killed by SIGPIPE
        # does, and point stdout at devnull so the interpreter's own flush at exit is silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE
    return code


BROKEN_PIPE = 141
"""The exit code when stdout's reader closed it: 128 + SIGPIPE, what a shell reports for a tool
that signal ended."""
