"""``fi-patches-run CMD...``: run a command with fi_patches active from interpreter start, for
an unmodified consumer (a vLLM or SGLang server and the workers it spawns)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence

from fi_patches._words import plain
from fi_patches.cli.hook import hook_installed
from fi_patches.startup import ENV


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: fi-patches-run COMMAND [ARGS...]\n\n" + plain(__doc__ or "").strip())
        return 0 if args else 2
    if not hook_installed():
        print(
            "fi-patches-run: the fi_patches start-up hook (fi_patches_auto.pth) is not in this "
            "Python's site-packages (an editable install has none); run "
            "'python -m fi_patches hook install', or add 'import fi_patches.auto' to the consumer",
            file=sys.stderr,
        )
    executable = shutil.which(args[0])
    if executable is None:
        print(f"fi-patches-run: {args[0]}: command not found", file=sys.stderr)
        return 127
    env = dict(os.environ)
    env[ENV] = "1"
    os.execve(executable, args, env)
    return 0  # not reached
