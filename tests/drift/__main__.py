"""Debug drift cases outside pytest.

``python -m tests.drift CASE...`` runs the baseline and the cases (ids as pytest shows them,
``autotune_tactics-removed``) on one zygote and prints each verdict; ``--inline CASE`` runs one
case in this very process (breakpoints and prints work) and prints its observation; ``--list``
prints every case id.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from tests.drift import pool
from tests.drift.cases import BASELINE, Case, all_cases
from tests.drift.verdict import collateral, problems


def _case(name: str) -> Case:
    for case in all_cases():
        if case.id == name:
            return case
    raise SystemExit(f"no drift case {name!r} (python -m tests.drift --list)")


def _inline(case: Case) -> int:
    import flashinfer  # noqa: F401  (imported before the table's fork, as in the zygote)

    from tests.drift import child, pins

    with tempfile.TemporaryDirectory(prefix="drift-") as scratch:
        table = Path(scratch) / "pins.json"
        pid = os.fork()
        if pid == 0:  # the table is made from the unbroken FlashInfer, in a process of its own
            code = 1
            try:
                pins.make_table(table)
                code = 0
            finally:
                os._exit(code)
        os.waitpid(pid, 0)
        observation = child.run(case.key, case.mutation, str(table))
    print(json.dumps(observation, indent=1, default=repr))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.drift", description=__doc__)
    parser.add_argument("cases", nargs="*", help="case ids, e.g. autotune_tactics-removed")
    parser.add_argument("--inline", action="store_true", help="run one case in this process")
    parser.add_argument("--list", action="store_true", help="print every case id")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(c.id for c in all_cases()))
        return 0
    cases = [_case(name) for name in args.cases]
    if args.inline:
        if len(cases) != 1:
            parser.error("--inline runs exactly one case")
        return _inline(cases[0])
    directory = Path(tempfile.mkdtemp(prefix="drift-"))
    results = pool.run(cases, directory, workers=1)
    base = results.observations[BASELINE]
    failed = 0
    for case in [None, *cases]:
        name = case.id if case else BASELINE
        observation = results.observations[name]
        found = problems(case, observation, base)
        failed += bool(found)
        notes = collateral(case, observation, base) if case and not found else []
        print(f"{name}: {'clean' if not found else 'FAILED'} ({observation.get('log')})")
        for line in found + [f"collateral: {n}" for n in notes]:
            print("  - " + line.replace("\n", "\n    "))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
