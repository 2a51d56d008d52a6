"""The docs against reality: the doctor block (``docs/install.md``) is ``doctor``'s real output
(``tools/doc_blocks.py``), the walkthrough's commands (``docs/pins-cli.md``) run as written with
the exit codes their comments give, the shipped example files are what ``tools/examples.py``
produces, and the README stays a landing page whose links reach real pages and anchors."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools import doc_blocks, examples

pytestmark = pytest.mark.release_independent
"""The docs and their examples are for the quick start's environment (FlashInfer 0.7.4): the
main run checks them, the compat matrix's cells do not."""

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _installed_flashinfer() -> str | None:
    from fi_patches.compat.features import installed_flashinfer

    return installed_flashinfer().version_text


def test_the_doctor_block_is_doctors_output():
    block = doc_blocks.current("doctor")
    if _installed_flashinfer() != "0.7.4" or importlib.util.find_spec("vllm") is not None:
        pytest.skip("the doctor block is for the quick start's environment")
    assert block == doc_blocks.doctor_block(), (
        "docs/install.md's doctor block is stale: run `python -m tools.doc_blocks --write`"
    )


def walkthrough() -> list[tuple[str, int]]:
    """The walkthrough's command lines and the exit code each one's comment gives (0 if none)."""
    block = doc_blocks.current("walkthrough")
    lines = [line for line in block.splitlines() if line and not line.startswith("```")]
    found = []
    for line in lines:
        code = re.search(r"#\s*exit (\d+)", line)
        found.append((line, int(code.group(1)) if code else 0))
    return found


def run_lines(lines: list[tuple[str, int]], folder: Path) -> list[tuple[str, int, str]]:
    """Run the lines in one bash in ``folder``, ``python`` being this interpreter; each line's
    exit code and output."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    script = []
    for i, (line, _) in enumerate(lines):
        command = line.split(" #", 1)[0].rstrip()
        script.append(f"{command} > out{i}.txt 2>&1; echo $? > rc{i}.txt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=folder, env=env, check=True, timeout=900)
    return [
        (line, int((folder / f"rc{i}.txt").read_text()), (folder / f"out{i}.txt").read_text())
        for i, (line, _) in enumerate(lines)
    ]


TUNE = "python -m fi_patches tune"


def test_the_walkthrough_runs_as_written(tmp_path):
    lines = [(line, code) for line, code in walkthrough() if TUNE not in line]
    assert len(lines) >= 4
    for (line, code), (_, rc, output) in zip(lines, run_lines(lines, tmp_path), strict=True):
        assert rc == code, f"{line}\n{output}"
        assert "Traceback" not in output, output
    assert (tmp_path / "pins.toml").is_file() and (tmp_path / "store.toml").is_file()


def test_the_walkthroughs_tune_runs_as_written(tmp_path):
    lines = [(line, code) for line, code in walkthrough() if line.startswith("EX=") or TUNE in line]
    (_, setup, _), (line, rc, output) = run_lines(lines, tmp_path)
    assert setup == 0
    assert rc == lines[1][1], f"{line}\n{output}"
    assert (tmp_path / "tuned.toml").is_file()


def test_the_shipped_examples_are_what_the_generator_produces():
    assert examples.differing() == [], "run `python -m tools.examples --write`"


def _slug(heading: str) -> str:
    """The anchor mkdocs' ``toc`` extension gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_the_readme_is_a_landing_page_whose_links_hold():
    """At most 250 lines; every link is absolute or reaches a file of the checkout (a page in
    docs/, CHANGELOG.md, LICENSE) and, where it names one, a heading's anchor there."""
    assert len(README.splitlines()) <= 250
    relative = re.findall(r"\]\((?!https?://)([^)]+)\)", README)
    assert any(link.startswith("docs/") for link in relative)
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), f"README.md links to {link}: no such file"
        if anchor:
            assert anchor in _anchors(target), f"README.md links to {link}: no such heading"
    license_text = (ROOT / "LICENSE").read_text()
    assert "[yyyy]" not in license_text and "APPENDIX" not in license_text


def test_ci_runs_the_readmes_test_command():
    """The quick start's test command is the one .ci/run runs, exactly."""
    blocks = re.findall(r"^```sh\n(.*?)\n```", README, flags=re.S | re.M)
    command = next(block for block in blocks if "pytest" in block)
    assert command.startswith(".venv/bin/python -m pytest")
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert any(line == command or line.startswith(f"{command} ||") for line in lines)
