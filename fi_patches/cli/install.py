"""The commands about this installation: ``hook`` puts the start-up hook into the environment
(or takes it out, or says where it is), ``fi-patches-run`` runs a command with fi_patches
active from its start (see :data:`HOOK_HELP` and :data:`RUN_HELP`, which the two print).

``doctor``: which features are enabled here, and why the others are not.

``precompile``: compile every pinned wide kernel for the device (or ``--arch``) before
serving, with a progress bar, and report each kernel's compile time and resources (a pinned
tactic that spills registers is flagged).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fi_patches._text import plain
from fi_patches.cli.console import render
from fi_patches.startup import ENV, PTH_LINE, PTH_NAME, requested

HOOK_HELP = """``hook install|uninstall|status``: put the ``FI_PATCHES_AUTO`` start-up hook
(``fi_patches_auto.pth``) into this environment's site-packages, take it out, or say where it
is. A wheel install ships the file; an editable install (the README's quick start) has none
until ``hook install`` writes it.

Exit codes: 0 done, or already so (``status``: the hook is installed and current); 1 the file
could not be written or removed, or a new interpreter does not load the hook (the message
names the file and the error); 3 (``status`` only) the hook is not installed, or outdated.
"""
"""``hook --help``'s description."""

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


def register_hook(commands: Any) -> None:
    from fi_patches._text import plain

    parser = commands.add_parser(
        "hook",
        help="install, uninstall or report the FI_PATCHES_AUTO start-up hook",
        description=plain(HOOK_HELP),
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


RUN_HELP = (
    "``fi-patches-run CMD...``: run a command with fi_patches active from interpreter start, for\n"
    "an unmodified consumer (a vLLM or SGLang server and the workers it spawns)."
)
"""``fi-patches-run --help``'s text after its usage line."""


def run_main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: fi-patches-run COMMAND [ARGS...]\n\n" + plain(RUN_HELP).strip())
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


def register_doctor(commands: Any) -> None:
    parser = commands.add_parser("doctor", help="report each feature's state and reason")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--fresh", action="store_true", help="run every self-check again (ignore the cache)"
    )
    parser.set_defaults(run=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    from fi_patches.compat import selfcheck_cache
    from fi_patches.overview import status

    selfcheck_cache.bypass(args.fresh)
    records = status()
    ops = _pinned_ops()
    if args.json:
        report = [r.to_dict() for r in records]
        for item in report:
            if item["name"] == "pinned_ops":
                item["ops"] = [dict(op.__dict__) for op in ops]
        print(json.dumps(report, indent=2))
        return 0
    rows = [
        (
            r.name,
            "enabled" if r.enabled else "disabled",
            r.flashinfer,
            r.cute_dsl,
            "yes" if r.in_matrix else "no",
            r.device,
            r.reason,
        )
        for r in records
    ]
    header = ("feature", "state", "flashinfer", "cute dsl", "in matrix", "device", "reason")
    print(render(header, rows))
    pins = [(r.name, r.pins) for r in records if r.pins]
    if pins:
        print()
        print(render(("feature", "pins"), pins))
    if ops:
        print()
        counts = [(o.op, o.entries, o.applied, o.invalid, o.unchecked) for o in ops]
        print(render(("op", "entries", "applied", "invalid", "unchecked"), counts))
    print(f"\nstart-up hook: {hook_state().summary()}")
    print(f"patch sets: {patch_sets()}")
    from fi_patches.sglang.plugin import summary

    print(f"SGLang plugin: {summary()}")
    return 0


def _pinned_ops() -> list[Any]:
    """The default table's ``[[pin]]`` entries per op, as ``pins check`` judges them here."""
    from fi_patches.pins.reading import PinTableError
    from fi_patches.pins.table import default_pins
    from fi_patches.tools.check import pins_per_op

    try:
        return pins_per_op(default_pins())
    except PinTableError:
        return []  # the pins column already names the problem


def patch_sets() -> str:
    """Each patch set of the lifecycle registry and whether it is installed in this process."""
    from fi_patches import startup

    states = [
        f"{name} {'not loaded' if entry is None else 'installed' if entry.installed else 'off'}"
        for name, entry in startup.entries()
    ]
    return ", ".join(states)


def register_precompile(commands: Any) -> None:
    parser = commands.add_parser(
        "precompile", help="compile the pinned wide kernels and report them"
    )
    parser.add_argument("--pins", help="pin table (default: FI_PATCHES_PINS or none)")
    parser.add_argument(
        "--arch", help="compile for this arch (sm_103a, sm_100a) instead of the device's"
    )
    parser.add_argument(
        "--no-ptxas", action="store_true", help="read resources from the cubin only"
    )
    parser.set_defaults(run=run_precompile)


def _blocked(arch_given: bool) -> str | None:
    """Why the wide kernel cannot be built here, or None."""
    from fi_patches.compat.features import feature, status_of

    record = status_of("wide_tile")
    if record.enabled:
        return None
    if arch_given:  # the device gate does not apply to an explicit arch; the internals do
        failed = [i.probe() for i in feature("wide_tile").internals()]
        problems = [f for f in failed if f]
        return problems[0] if problems else None
    return record.reason


def _progress(total: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="compiling wide kernels", unit="kernel", file=sys.stderr)


def run_precompile(args: argparse.Namespace) -> int:
    from fi_patches.pins.reading import PinTableError
    from fi_patches.pins.table import as_table, default_pins

    try:
        table = as_table(args.pins) if args.pins else default_pins()
    except PinTableError as exc:
        print(f"precompile: {exc}", file=sys.stderr)
        return 1
    entries = table.entries("wide")
    if not entries:
        print(f"precompile: no [[wide]] pins in {table.source}; nothing to compile")
        return 0
    blocked = _blocked(bool(args.arch))
    if blocked:
        print(f"precompile: the wide kernel cannot be built here: {blocked}", file=sys.stderr)
        return 1
    from fi_patches.pins.keys import as_tactic
    from fi_patches.tools.wide_resources import compile_with_resources
    from fi_patches.wide.budget import WideArchError, resolve_arch
    from fi_patches.wide.kernel import compile_wide
    from fi_patches.wide.tactics import wide_pin_reason

    try:
        arch = resolve_arch(args.arch)
    except WideArchError as exc:
        print(f"precompile: {exc}", file=sys.stderr)
        return 1
    rows: list[tuple[Any, ...]] = []
    failures = spills = 0
    bar = _progress(len(entries))
    for entry in entries:
        label = (f"{entry.n}x{entry.k}", entry.tile, as_tactic(entry.tactic))
        reason = wide_pin_reason(entry.n, entry.k, entry.tile, entry.tactic, arch=arch)
        if reason is None:
            use_ptxas = False if args.no_ptxas else None  # None: ptxas when it is installed
            try:
                res = compile_with_resources(
                    entry.tile, entry.tactic, arch=arch, use_ptxas=use_ptxas
                )
                seconds = compile_wide(entry.tile, entry.tactic, arch=arch).compile_seconds
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
            else:
                spilled = bool(res.spill_store_bytes or res.spill_load_bytes)
                spills += spilled
                spill_text = (
                    "n/a"
                    if res.spill_store_bytes is None
                    else f"{res.spill_store_bytes}/{res.spill_load_bytes}"
                )
                note = "SPILLS registers" if spilled else ""
                rows.append(
                    (
                        *label,
                        f"{seconds:.2f}",
                        res.registers,
                        spill_text,
                        res.stack_frame_bytes,
                        res.launch_dynamic_smem_bytes,
                        note,
                    )
                )
        if reason is not None:
            failures += 1
            rows.append((*label, "-", "-", "-", "-", "-", f"not built: {reason}"))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    print(f"wide kernels for {arch} from {table.source}:")
    print(
        render(
            (
                "weight",
                "tile",
                "tactic",
                "compile s",
                "registers",
                "spill st/ld",
                "stack",
                "smem",
                "note",
            ),
            rows,
        )
    )
    if spills:
        print(f"{spills} pinned kernel(s) spill registers: consider another tactic for that tile")
    return 1 if failures else 0
