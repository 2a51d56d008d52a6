"""A fork server for tests that run ``python -m ...`` or ``python -c ...`` many times: one
process imports torch once (and nothing of fi_patches or FlashInfer), then forks one child per
command, so no child pays torch's import (seconds on CPU). Each child runs the command as a
fresh interpreter would (its own ``sys.argv``, ``sys.path`` from its ``PYTHONPATH`` and working
directory, environment, ``__main__``), with stdout and stderr captured; what it returns is a
``subprocess.CompletedProcess`` like ``subprocess.run(..., capture_output=True, text=True)``.

Only for commands whose outcome cannot depend on torch having been imported first (any
consumer of fi_patches imports torch first anyway); a test that fakes or breaks torch, or needs
FlashInfer's import to happen in the child, spawns its own process.

Run by :class:`ForkServer` as ``python -m tests.forkserver``: it prints one ``{"ready": ...}``
line, then answers each job line on stdin (``{"argv", "env", "cwd", "out", "err", "timeout"}``)
with ``{"returncode": ...}``, where a child still running at ``timeout`` is killed (-9).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

PRELOADED = ("torch",)
"""What the server imports before forking: torch alone (neither FlashInfer nor fi_patches,
whose imports the commands under test exercise)."""

_START_TIMEOUT = 300.0


def _child(job: dict[str, Any], base_path: list[str]) -> None:
    """In the forked child: become the command's interpreter, run it, never return."""
    code = 1
    try:
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        extra = [p for p in job["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        flag, target, *rest = job["argv"]
        first = "" if flag == "-c" else os.getcwd()
        sys.path[:] = [first, *(os.path.abspath(p) for p in extra), *base_path]
        import runpy

        try:
            if flag == "-m":
                sys.argv = [target, *rest]
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            elif flag == "-c":
                sys.argv = ["-c", *rest]
                main = type(sys)("__main__")
                sys.modules["__main__"] = main
                exec(compile(target, "<string>", "exec"), main.__dict__)
            else:
                raise ValueError(f"forkserver runs -m or -c, not {flag!r}")
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        try:
            import atexit  # what a fresh interpreter runs at exit (logging's flush among them)

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _wait(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def main() -> int:
    for name in PRELOADED:
        __import__(name)
    leaked = [m for m in sys.modules if m.split(".")[0] in ("fi_patches", "flashinfer")]
    if leaked:  # a startup hook imported them: the children would not start fresh
        print(json.dumps({"error": f"imported at startup: {leaked[:5]}"}), flush=True)
        return 1
    # sys.path as a fresh interpreter builds it, minus its first entry and PYTHONPATH's.
    own = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    base_path = [p for p in sys.path[1:] if os.path.abspath(p) not in own]
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(job, base_path)
        print(json.dumps({"returncode": _wait(pid, float(job["timeout"]))}), flush=True)
    return 0


class ForkServer:
    """One server process; :meth:`run` may be called from several threads (each call gets its
    own server, started on first use, so calls run in parallel up to the threads used)."""

    def __init__(self) -> None:
        self._idle: list[subprocess.Popen[str]] = []
        self._all: list[subprocess.Popen[str]] = []
        self._lock = threading.Lock()
        self._folder = Path(tempfile.mkdtemp(prefix="forkserver-"))
        self._count = 0

    def _server_env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("FI_PATCHES_AUTO", None)  # the startup hook would import fi_patches here
        return env

    def _startup_differs(self, env: dict[str, str], cwd: Path | str) -> bool:
        """Whether a fresh interpreter with ``env`` would start differently from the server:
        another ``PYTHON*`` setting (hash seed, warnings, ...), the startup hook on
        (``FI_PATCHES_AUTO``), or a ``sitecustomize``/``usercustomize`` on its ``PYTHONPATH``.
        Such a command gets a real subprocess instead."""
        ours = self._server_env()

        def startup(e: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in e.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}

        if startup(env) != startup(ours) or env.get("FI_PATCHES_AUTO", "").strip():
            return True
        return any(
            (Path(cwd, entry) / f"{name}.py").exists()
            for entry in env.get("PYTHONPATH", "").split(os.pathsep)
            if entry
            for name in ("sitecustomize", "usercustomize")
        )

    def _start(self) -> subprocess.Popen[str]:
        env = self._server_env()
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], _START_TIMEOUT)
        reply = json.loads(process.stdout.readline() or "{}") if ready else {}
        if not reply.get("ready"):
            process.kill()
            raise RuntimeError(f"the fork server did not start: {reply}")
        with self._lock:
            self._all.append(process)
        return process

    def run(
        self, argv: list[str], env: dict[str, str], cwd: Path | str, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """``[sys.executable, *argv]`` (``argv`` starting with ``-m`` or ``-c``) with exactly
        ``env`` in ``cwd``, as :func:`subprocess.run` with ``capture_output=True,
        text=True`` would return it."""
        if self._startup_differs(env, cwd):
            return subprocess.run(
                [sys.executable, *argv],
                capture_output=True,
                text=True,
                env=env,
                cwd=cwd,
                timeout=timeout,
                check=False,
            )
        with self._lock:
            process = self._idle.pop() if self._idle else None
            self._count += 1
            name = self._folder / str(self._count)
        process = process or self._start()
        assert process.stdin is not None and process.stdout is not None
        job = {
            "argv": argv,
            "env": dict(env),
            "cwd": str(cwd),
            "out": f"{name}.out",
            "err": f"{name}.err",
            "timeout": timeout,
        }
        process.stdin.write(json.dumps(job) + "\n")
        process.stdin.flush()
        ready, _, _ = select.select([process.stdout], [], [], timeout + 60)
        line = process.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError("the fork server stopped answering")
        with self._lock:
            self._idle.append(process)
        out, err = (Path(job[k]).read_text(errors="replace") for k in ("out", "err"))
        returncode = json.loads(line)["returncode"]
        return subprocess.CompletedProcess([sys.executable, *argv], returncode, out, err)

    def close(self) -> None:
        for process in self._all:
            if process.poll() is None:
                assert process.stdin is not None
                process.stdin.close()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


if __name__ == "__main__":
    raise SystemExit(main())
