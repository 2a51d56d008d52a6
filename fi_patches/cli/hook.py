"""``hook install|uninstall|status``: put the ``FI_PATCHES_AUTO`` start-up hook
(``fi_patches_auto.pth``) into this environment's site-packages, take it out, or say where it
is. A wheel install ships the file; an editable install (the README's quick start) has none
until ``hook install`` writes it.

Exit codes: 0 done, or already so (``status``: the hook is installed and current); 1 the file
could not be written or removed, or a new interpreter does not load the hook (the message
names the file and the error); 3 (``status`` only) the hook is not installed, or outdated.
"""

from __future__ import annotations

import argparse
import os
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fi_patches.startup import ENV, PTH_LINE, PTH_NAME, requested

NOT_INSTALLED = 3


@dataclass(frozen=True)
class HookState:
    """Where the start-up hook is, whether its line is this version's, and whether
    ``FI_PATCHES_AUTO`` would make it activate in a process started with this environment."""

    found: tuple[Path, ...]
    current: bool
    target: Path
    variable: str | None

    @property
    def installed(self) -> bool:
        return bool(self.found) and self.current

    @property
    def would_activate(self) -> bool:
        return self.installed and self.variable is not None and requested({ENV: self.variable})

    def summary(self) -> str:
        """One sentence for ``doctor`` and ``hook status``."""
        if not self.found:
            where = f"not installed (no {PTH_NAME} in {self.target})"
            fix = "; `python -m fi_patches hook install` adds it"
        elif not self.current:
            where = f"outdated ({self.found[0]} holds another line)"
            fix = "; `python -m fi_patches hook install` rewrites it"
        else:
            where, fix = f"installed ({self.found[0]})", ""
        env = f"{ENV} is unset" if self.variable is None else f"{ENV}={self.variable!r}"
        if self.would_activate:
            return f"{where}; {env}: new processes apply the default pins when FlashInfer loads."
        if self.installed:
            return f"{where}; {env}: it stays idle (set {ENV}=1 to activate it)."
        return f"{where}{fix}; {env}."


def site_dirs() -> list[Path]:
    """The site-packages directories this interpreter reads ``.pth`` files from."""
    dirs = [Path(p) for p in site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(Path(site.getusersitepackages()))
    dirs += [Path(p) for p in sys.path if p.endswith("site-packages")]
    return list(dict.fromkeys(dirs))


def target_dir() -> Path:
    """Where ``hook install`` writes: this environment's site-packages (``purelib``)."""
    return Path(sysconfig.get_paths()["purelib"])


def _is_current(path: Path) -> bool:
    try:
        return path.read_text(encoding="utf-8").strip() == PTH_LINE
    except OSError:
        return False


def hook_state() -> HookState:
    """The start-up hook as this interpreter would load it."""
    found = tuple(d / PTH_NAME for d in site_dirs() if (d / PTH_NAME).is_file())
    return HookState(
        found=found,
        current=bool(found) and all(_is_current(p) for p in found),
        target=target_dir(),
        variable=os.environ.get(ENV),
    )


def hook_installed() -> bool:
    """Whether this interpreter's site-packages holds the current start-up hook."""
    return hook_state().installed


def _loads_in_new_interpreter() -> str | None:
    """None when a new interpreter with ``FI_PATCHES_AUTO=1`` puts the start-up finder on
    ``sys.meta_path``, else what it did instead."""
    code = (
        "import sys; from fi_patches.startup import pending; "
        "print('pending' if pending() else 'absent')"
    )
    env = {**os.environ, ENV: "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{sys.executable} could not be run ({exc})"
    if done.returncode != 0:
        return f"{sys.executable} failed: {done.stderr.strip().splitlines()[-1:]}"
    if done.stdout.strip() != "pending":
        return f"a new {sys.executable} with {ENV}=1 did not load the hook"
    return None


def run_install(args: argparse.Namespace) -> int:
    path = target_dir() / PTH_NAME
    if _is_current(path):
        print(f"hook install: already installed: {path}")
        return 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{PTH_NAME}.{os.getpid()}.tmp")
        tmp.write_text(PTH_LINE + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        print(f"hook install: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    problem = _loads_in_new_interpreter()
    if problem is not None:
        print(f"hook install: wrote {path}, but {problem}", file=sys.stderr)
        return 1
    print(f"hook install: wrote {path}; processes started with {ENV}=1 now apply the pins")
    return 0


def run_uninstall(args: argparse.Namespace) -> int:
    found = hook_state().found
    if not found:
        print(
            f"hook uninstall: not installed (no {PTH_NAME} in {', '.join(map(str, site_dirs()))})"
        )
        return 0
    code = 0
    for path in found:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            print(f"hook uninstall: cannot remove {path}: {exc.strerror or exc}", file=sys.stderr)
            code = 1
            continue
        note = (
            " (it came with the wheel; reinstalling fi_patches brings it back)"
            if _from_wheel(path)
            else ""
        )
        print(f"hook uninstall: removed {path}{note}")
    return code


def _from_wheel(path: Path) -> bool:
    """Whether an installed fi_patches distribution's RECORD lists ``path``."""
    for record in path.parent.glob("fi_patches-*.dist-info/RECORD"):
        try:
            if any(line.split(",", 1)[0] == PTH_NAME for line in record.read_text().splitlines()):
                return True
        except OSError:
            continue
    return False


def run_status(args: argparse.Namespace) -> int:
    state = hook_state()
    print(f"start-up hook: {state.summary()}")
    return 0 if state.installed else NOT_INSTALLED


def register(commands: Any) -> None:
    from fi_patches._words import plain

    parser = commands.add_parser(
        "hook",
        help="install, uninstall or report the FI_PATCHES_AUTO start-up hook",
        description=plain(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("install", help=f"write {PTH_NAME} into this environment").set_defaults(
        run=run_install
    )
    verbs.add_parser("uninstall", help=f"remove {PTH_NAME}").set_defaults(run=run_uninstall)
    verbs.add_parser("status", help="where the hook is and whether it would activate").set_defaults(
        run=run_status
    )
