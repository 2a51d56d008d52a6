"""SGLang's per-rank tuner caches as input to ``pins record`` and ``pins diff``: a directory laid
out as SGLang lays it out, ``$SGLANG_CACHE_DIR/flashinfer/autotune/<FlashInfer version>/sm<XY>/
<model key>/rank_tp{t}_pp{p}_dp{d}.json`` (plus ``runs/`` of per-start files), stands for the
rank files of the installed FlashInfer and the target arch, one source per file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fi_patches.internals import sglang as layout
from fi_patches.pins.record import TunerCacheError, expand_sources


@dataclass(frozen=True)
class Source:
    """One input: how reports name it, and the file or store to read."""

    label: str
    path: Path


def _rank_files(key_dir: Path) -> list[Path]:
    found = []
    for folder in (key_dir, key_dir / layout.RUNS_DIR):
        if folder.is_dir():
            found += sorted(
                p for p in folder.iterdir() if p.is_file() and layout.RANK_FILE.match(p.name)
            )
    return found


def is_sglang_dir(path: Path) -> bool:
    """Whether ``path`` is an ``SGLANG_CACHE_DIR`` or one model key's directory of rank files."""
    return path.is_dir() and (
        path.joinpath(*layout.CACHE_SUBDIR).is_dir() or bool(_rank_files(path))
    )


def _key_dir(root: Path, flashinfer_version: str | None, arch: str | None) -> Path:
    tuned = root.joinpath(*layout.CACHE_SUBDIR)
    if not tuned.is_dir():
        return root  # a model key's directory itself
    found = sorted(f"{v.name}/{a.name}" for v in tuned.iterdir() if v.is_dir() for a in v.iterdir())
    if flashinfer_version is None or arch is None:
        missing = "FlashInfer is not installed here" if flashinfer_version is None else "no arch"
        raise TunerCacheError(
            f"{root} is an SGLang cache directory, but {missing} to pick its rank files by "
            f"(it holds {', '.join(found) or 'nothing'}); pass --device, or the model key's "
            "directory itself"
        )
    base = tuned / flashinfer_version / layout.arch_dir(arch)
    keys = (
        [d for d in sorted(base.iterdir()) if d.is_dir() and _rank_files(d)]
        if base.is_dir()
        else []
    )
    where = f"{tuned}/{flashinfer_version}/{layout.arch_dir(arch)}"
    if not keys:
        raise TunerCacheError(
            f"{root} holds no SGLang rank files of FlashInfer {flashinfer_version} on {arch} "
            f"(no {where}/<model key>/rank_tp*_pp*_dp*.json; it holds "
            f"{', '.join(found) or 'nothing'})"
        )
    if len(keys) > 1:
        raise TunerCacheError(
            f"{where} holds the rank files of {len(keys)} model keys "
            f"({', '.join(k.name for k in keys)}): pass the directory of one"
        )
    return keys[0]


def expand(
    inputs: list[str], flashinfer_version: str | None, arch: str | None
) -> tuple[list[Source], dict[str, str]]:
    """The sources ``inputs`` stand for, and for each SGLang directory among them the text its
    table's ``[meta] source`` gives it. A plain file or v2 store is one source named by its
    path, a vLLM cache directory its files; an SGLang directory is its rank files, each named
    by its path under the model key's directory. :class:`TunerCacheError` names a directory
    without rank files to read."""
    sources: list[Source] = []
    described: dict[str, str] = {}
    for text in inputs:
        path = Path(text)
        if not is_sglang_dir(path):  # a file, a v2 store, or vLLM's layout
            sources += [Source(found, Path(found)) for found in expand_sources([text])]
            continue
        key_dir = _key_dir(path, flashinfer_version, arch)
        files = _rank_files(key_dir)
        if not files:
            raise TunerCacheError(f"{key_dir} holds no SGLang rank file (rank_tp*_pp*_dp*.json)")
        sources += [Source(str(f.relative_to(key_dir)), f) for f in files]
        described[text] = f"{key_dir} ({len(files)} SGLang rank files)"
    labels = [s.label for s in sources]
    if len(set(labels)) < len(labels):  # rank files of two directories: name them in full
        sources = [Source(str(s.path), s.path) for s in sources]
    return sources, described
