"""The zygote: a process that imports torch, FlashInfer and the test helpers once (nothing of
fi_patches), then forks one child per drift job, so no case pays those imports (seconds on CPU).

Run by ``tests/drift/pool.py`` as ``python -m tests.drift.zygote '<modules JSON>'``; it imports
the given modules (the boundary's declared modules), prints one ``{"ready": ...}`` line (or
``{"import_error": ...}`` and exits), then answers each job line on stdin with one status line:

``{"id", "job": "case"|"table", "key", "mutation", "table", "out", "log", "timeout"}`` ->
``{"id", "status": "ok"|"timeout"|"failed", "detail", "seconds"}``.

The child writes its observation as JSON to ``out``, its stdout and stderr to ``log``; a child
still running at ``timeout`` seconds is killed.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

HELPERS = ("pytest", "tests.simulation", "tests.mxfp8_inputs")
"""Test helpers every child imports (none imports fi_patches), imported once in the zygote."""


def _child(job: dict[str, Any]) -> None:
    """In the forked child: run the job, write its JSON, and never return."""
    code = 1
    try:
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        from tests.drift import child, pins

        try:
            if job["job"] == "table":
                result: Any = pins.make_table(Path(job["table"]))
            else:
                result = child.run(job.get("key"), job.get("mutation"), job["table"])
        except BaseException:
            result = {"harness_error": traceback.format_exc()}
        tmp = job["out"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1, default=repr)
        os.replace(tmp, job["out"])
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, timeout: float) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", f"killed after {timeout:.0f} s"
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return "ok", ""
    if os.WIFSIGNALED(status):
        return "failed", f"killed by signal {os.WTERMSIG(status)}"
    return "failed", f"exit status {os.WEXITSTATUS(status)}"


def _serve(lines: TextIO, answer: TextIO) -> None:
    for line in lines:
        if not line.strip():
            continue
        job = json.loads(line)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(job)
        status, detail = _wait(pid, float(job["timeout"]))
        reply = {"id": job["id"], "status": status, "detail": detail}
        reply["seconds"] = round(time.monotonic() - started, 2)
        answer.write(json.dumps(reply) + "\n")
        answer.flush()


def main(argv: list[str]) -> int:
    started = time.monotonic()
    answer = sys.stdout
    try:
        import torch  # noqa: F401

        importlib.import_module("flashinfer")
    except BaseException as exc:
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        answer.write(json.dumps({"import_error": f"{type(exc).__name__}: {text}"}) + "\n")
        answer.flush()
        return 0
    for name in json.loads(argv[0]):
        with contextlib.suppress(Exception):  # absent in this release: its cases say so
            importlib.import_module(name)
    # What every child imports before it breaks anything, none of it fi_patches: pytest and the
    # device simulation (tenths of a second a case otherwise).
    for name in HELPERS:
        importlib.import_module(name)
    leaked = [m for m in sys.modules if m.split(".")[0] == "fi_patches"]
    assert not leaked, f"the zygote imported fi_patches ({leaked[:3]})"
    version = getattr(sys.modules["flashinfer"], "__version__", "?")
    ready = {"ready": True, "version": version, "seconds": round(time.monotonic() - started, 2)}
    answer.write(json.dumps(ready) + "\n")
    answer.flush()
    _serve(sys.stdin, answer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
