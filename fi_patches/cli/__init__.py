"""``python -m fi_patches``: the command line. Library code logs; only the CLI prints."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from fi_patches.cli import chain, install, pins

DESCRIPTION = (
    "fi_patches' command line: check this install (doctor), record, compare and check pin "
    "tables (pins), choose pins by timing (tune), check them on the GPU (validate), compile "
    "the wide kernels ahead (precompile) and manage the start-up hook (hook)."
)


def program_name(argv0: str | None = None) -> str:
    """The program as the user invoked it: ``fi-patches`` from the console script, ``python -m
    fi_patches`` from the module (whose ``argv[0]`` is the path of its ``__main__.py``)."""
    name = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    return "python -m fi_patches" if name in ("__main__.py", "-c", "") else name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program_name(), description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="show fi_patches' log")
    commands = parser.add_subparsers(dest="command", required=True)
    install.register_doctor(commands)
    install.register_hook(commands)
    pins.register(commands)
    install.register_precompile(commands)
    chain.register_tune(commands)
    chain.register_validate(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from fi_patches.compat.features import verify_fully

    verify_fully()  # every command is tooling: it verifies, as the compat matrix does
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
