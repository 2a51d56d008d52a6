"""Whether a ``[[pin]]``'s tactic is one its runner offers for the entry's keys, checked where
this process can have that runner's list: a runner of the entry's class that is live here (the
model ran in this process, and check is called from Python), or one of a class of the
consumer's own that check can make with no arguments (it never makes FlashInfer's own runners:
making one may load or build its kernels). Elsewhere the entry stays unchecked, and its reason
names the runner and why its list cannot be had here: FlashInfer builds that class inside a
factory and check makes no runner, its constructor needs arguments, or listing raised (most
runners need their GPU).

A key's inputs are built from its profile: float32 tensors of the key's shapes, views of one
element (no memory), on the CUDA device where there is one. A runner whose extras for those
inputs are not the entry's is not asked: its list for the entry's key cannot be had that way.
"""

from __future__ import annotations

import gc
import inspect
from dataclasses import dataclass
from typing import Any

from fi_patches._untrusted import error_text
from fi_patches.pins.keys import as_tactic, extras_text, tactic_text
from fi_patches.pins.tuner_pin import TunerPin

DTYPE = "float32"
"""The dtype of the inputs a key's membership is checked with."""

MAX_SHOWN = 3
"""Offered tactics a reason shows as examples."""


@dataclass(frozen=True)
class Verdict:
    """``member`` True (offered for every key), False (not offered for ``rows``: the entry is
    invalid) or None (unchecked here), with the reason as a clause."""

    member: bool | None
    reason: str


@dataclass(frozen=True)
class _Runner:
    instance: Any
    how: str
    """How reasons name it: ``a live X`` or ``X() made by check``."""
    why_not: str = ""


class Runners:
    """The runners of this process by class name, each looked up once per check: a live
    instance first, else one made with no arguments, else why there is none."""

    def __init__(self) -> None:
        self._found: dict[str, _Runner] = {}

    def get(self, name: str) -> _Runner:
        if name not in self._found:
            self._found[name] = self._find(name)
        return self._found[name]

    def _find(self, name: str) -> _Runner:
        from fi_patches.internals import tuner as fi_tuner
        from fi_patches.patching import all_subclasses

        classes = [c for c in all_subclasses(fi_tuner.tunable_runner()) if c.__name__ == name]
        if not classes:
            return _Runner(None, "", _absent(name))
        live = _live_instance(classes)
        if live is not None:
            return _Runner(live, f"a live {name}")
        own = [c for c in classes if not _flashinfers(c)]
        if not own:
            return _Runner(
                None,
                "",
                f"no {name} is live in this process, and check makes none of FlashInfer's own "
                "runners (making one may load or build its kernels)",
            )
        problems = []
        for cls in own:
            needs = _required_parameters(cls)
            if needs:
                problems.append(f"its constructor needs {', '.join(needs)}")
                continue
            try:
                return _Runner(cls(), f"{name}() made by check")
            except Exception as exc:
                problems.append(f"{name}() raised {error_text(exc)}")
        return _Runner(
            None, "", f"no {name} is live in this process and check makes none ({problems[0]})"
        )


def _absent(name: str) -> str:
    """Why no class ``name`` is loaded: FlashInfer builds it in a factory, or its module is
    not imported here."""
    from fi_patches.internals.catalog import catalog

    found = catalog()
    defined = found.defined.get(name) if found is not None else None
    if defined is not None and defined.nested:
        return (
            f"FlashInfer builds {name} inside a factory function ({defined.file}), so none "
            "exists until its op runs in this process, and check makes no runner"
        )
    if defined is not None:
        return f"{name} ({defined.file}) is not loaded in this process, and check makes no runner"
    return f"no class {name} is loaded in this process, and check makes no runner"


def _flashinfers(cls: type) -> bool:
    """Whether ``cls`` is defined in FlashInfer's package."""
    from fi_patches.internals.flashinfer import FLASHINFER

    return str(cls.__module__).split(".")[0] == FLASHINFER.module


def _live_instance(classes: list[type]) -> Any:
    """A live instance of one of ``classes`` (what refers to a class: its instances among
    others), or None."""
    for found in gc.get_referrers(*classes):
        if type(found) in classes:
            return found
    return None


def _required_parameters(cls: type) -> list[str]:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def _inputs(profile: tuple[tuple[int, ...], ...]) -> list[Any]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    one = torch.zeros((), dtype=getattr(torch, DTYPE), device=device)
    return [one.expand(shape) for shape in profile]


def check(entry: TunerPin, runners: Runners) -> Verdict:
    """Whether ``entry``'s tactic is offered by a runner of its class for each of its keys (the
    ends of its row range and the powers of two between)."""
    from fi_patches.pinning import stack
    from fi_patches.pins.diff import pin_keys

    tactic = tactic_text(entry.tactic)
    later = (
        f"; whether tactic {tactic} is in {entry.runner}'s own list for this key is checked when "
        "the tuner first lists it (a pin it lacks gets the stock list and one error)"
    )
    runner = runners.get(entry.runner)
    if runner.instance is None:
        return Verdict(None, runner.why_not + later)
    keys = pin_keys(entry)
    if any(d < 0 for key in keys for shape in key.profile for d in shape):
        return Verdict(
            None,
            f"its shapes hold a dimension FlashInfer's tuner constrains (-1) or any value "
            f'matches ("*"), so check cannot build the inputs of its keys for {runner.how}' + later,
        )
    rows_checked = []
    for key in keys:
        rows = entry.shapes.rows_of(key.profile)
        at = f"rows {rows}" if entry.shapes.has_rows else "its key"
        try:
            inputs = _inputs(key.profile)
            with stack.isolated():  # the stock list, whatever blocks are open here
                if entry.extras is not None:
                    extras = extras_text(runner.instance.get_cache_key_extras(inputs))
                    if extras != entry.extras:
                        return Verdict(
                            None,
                            f"{runner.how} gives the {DTYPE} inputs check builds for {at} the "
                            f"extras {extras}, not the entry's {entry.extras}, so its list for "
                            "this key cannot be had here" + later,
                        )
                offered = [as_tactic(t) for t in runner.instance.get_valid_tactics(inputs, None)]
        except Exception as exc:
            return Verdict(
                None,
                f"{runner.how} could not list its tactics here (for {at}: {error_text(exc)})"
                + later,
            )
        if entry.tactic not in offered:
            sample = ", ".join(tactic_text(t) for t in offered[:MAX_SHOWN]) or "none"
            return Verdict(
                False,
                f"is not among the {len(offered)} tactics {runner.how} offers for {at} "
                f"(e.g. {sample})",
            )
        rows_checked.append(str(rows))
    where = f"rows {', '.join(rows_checked)}" if entry.shapes.has_rows else "its key"
    return Verdict(True, f"tactic {tactic} is among the tactics {runner.how} offers for {where}")
