"""Servers' tuner cache directories as input to ``pins record`` and ``pins diff``. Each stands for
the files of the installed FlashInfer and the target arch, one source per file:

* SGLang's per-rank files, ``$SGLANG_CACHE_DIR/flashinfer/autotune/<FlashInfer version>/sm<XY>/
  <model key>/rank_tp{t}_pp{p}_dp{d}.json`` (plus ``runs/`` of per-start files);
* vLLM's v1 files, ``$VLLM_CACHE_ROOT/flashinfer_autotune_cache/<FlashInfer version>/<archs>/
  <config hash>/autotune_configs.json``: the cache root, its ``flashinfer_autotune_cache`` and a
  ``<FlashInfer version>`` directory resolve to one ``<archs>`` directory, whose files are read
  as any ``<dir>/<config hash>/autotune_configs.json`` directory is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fi_patches.internals import sglang as layout
from fi_patches.internals import vllm as vllm_layout
from fi_patches.tools.record import TunerCacheError, expand_sources


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


def _subdirs(folder: Path) -> list[Path]:
    try:
        return sorted(d for d in folder.iterdir() if d.is_dir())
    except OSError as exc:  # vanished or unreadable while it is read
        raise TunerCacheError(
            f"the tuner cache directory {folder} cannot be read ({exc.strerror or exc})"
        ) from exc


def _held(tuned: Path, versions: list[Path] | None = None) -> str:
    """What a ``<FlashInfer version>/<arch>/`` tree holds, for messages: ``0.7.2/sm103, ...``."""
    found = [f"{v.name}/{a.name}" for v in versions or _subdirs(tuned) for a in _subdirs(v)]
    return ", ".join(found) or "nothing"


def _unresolved(root: Path, server: str, held: str, missing: str, hint: str) -> TunerCacheError:
    """``root`` cannot be resolved: ``missing`` (no installed FlashInfer, or no arch) to pick
    its files by."""
    return TunerCacheError(
        f"{root} is {server} cache directory, but {missing} to pick its tuner files by (it "
        f"holds {held}); pass --device, or {hint} itself"
    )


def _missing(flashinfer_version: str | None) -> str:
    return "FlashInfer is not installed here" if flashinfer_version is None else "no arch"


def _key_dir(root: Path, flashinfer_version: str | None, arch: str | None) -> Path:
    tuned = root.joinpath(*layout.CACHE_SUBDIR)
    if not tuned.is_dir():
        return root  # a model key's directory itself
    if flashinfer_version is None or arch is None:
        raise _unresolved(
            root,
            "an SGLang",
            _held(tuned),
            _missing(flashinfer_version),
            "the model key's directory",
        )
    base = tuned / flashinfer_version / layout.arch_dir(arch)
    keys = [d for d in _subdirs(base) if _rank_files(d)] if base.is_dir() else []
    where = f"{tuned}/{flashinfer_version}/{layout.arch_dir(arch)}"
    if not keys:
        raise TunerCacheError(
            f"{root} holds no SGLang rank files of FlashInfer {flashinfer_version} on {arch} "
            f"(no {where}/<model key>/rank_tp*_pp*_dp*.json; it holds {_held(tuned)})"
        )
    if len(keys) > 1:
        raise TunerCacheError(
            f"{where} holds the rank files of {len(keys)} model keys "
            f"({', '.join(k.name for k in keys)}): pass the directory of one"
        )
    return keys[0]


def _vllm_tree(path: Path) -> tuple[Path, Path | None] | None:
    """``(flashinfer_autotune_cache, the release directory given or None)`` when ``path`` is
    vLLM's cache root, its ``flashinfer_autotune_cache`` or one release's directory in it; else
    None."""
    if not path.is_dir():
        return None
    if (path / vllm_layout.AUTOTUNE_CACHE_DIR).is_dir():
        return path / vllm_layout.AUTOTUNE_CACHE_DIR, None
    if path.name == vllm_layout.AUTOTUNE_CACHE_DIR:
        return path, None
    if path.parent.name == vllm_layout.AUTOTUNE_CACHE_DIR:
        return path.parent, path
    return None


def _vllm_arch_dir(path: Path, flashinfer_version: str | None, arch: str | None) -> Path | None:
    """The ``<archs>`` directory of vLLM's tree at ``path`` for the installed FlashInfer (or the
    release directory given) and ``arch``; None when ``path`` is no level of that tree. A
    directory of that arch alone is preferred to one shared with other archs."""
    tree = _vllm_tree(path)
    if tree is None:
        return None
    tuned, given = tree
    releases = [given] if given is not None else _subdirs(tuned)
    release = given.name if given is not None else flashinfer_version
    if release is None or arch is None:
        hint = "the directory of one release and arch"
        raise _unresolved(path, "a vLLM", _held(tuned, releases), _missing(release), hint)
    archs = [
        a
        for v in releases
        if v.name == release
        for a in _subdirs(v)
        if arch in vllm_layout.workspace_archs(a.name)
    ]
    alone = [a for a in archs if vllm_layout.workspace_archs(a.name) == (arch,)]
    picked = alone if len(alone) == 1 else archs
    if not picked:
        raise TunerCacheError(
            f"{path} holds no vLLM tuner cache of FlashInfer {release} on {arch} (no "
            f"{tuned}/{release}/<arch>/<config hash>/{vllm_layout.AUTOTUNE_FILE} for {arch}; it "
            f"holds {_held(tuned, releases)})"
        )
    if len(picked) > 1:
        raise TunerCacheError(
            f"{tuned}/{release} holds the tuner caches of {len(picked)} arch directories for "
            f"{arch} ({', '.join(a.name for a in picked)}): pass the directory of one"
        )
    return picked[0]


def expand(
    inputs: list[str], flashinfer_version: str | None, arch: str | None
) -> tuple[list[Source], dict[str, str]]:
    """The sources ``inputs`` stand for, and for each server directory among them the text its
    table's ``[meta] source`` gives it. A plain file or v2 store is one source named by its
    path; an SGLang directory is its rank files, each named by its path under the model key's
    directory; vLLM's ``<dir>/<config hash>/autotune_configs.json`` directory, or a level of its
    tree above ``<dir>``, is that ``<dir>``'s files, each named by its path under it.
    :class:`TunerCacheError` names a directory without files of this release and arch to
    read."""
    sources: list[Source] = []
    described: dict[str, str] = {}
    for text in inputs:
        path = Path(text)
        if is_sglang_dir(path):
            key_dir = _key_dir(path, flashinfer_version, arch)
            files = _rank_files(key_dir)
            if not files:
                raise TunerCacheError(
                    f"{key_dir} holds no SGLang rank file (rank_tp*_pp*_dp*.json)"
                )
            sources += [Source(str(f.relative_to(key_dir)), f) for f in files]
            described[text] = f"{key_dir} ({len(files)} SGLang rank files)"
            continue
        arch_dir = _vllm_arch_dir(path, flashinfer_version, arch)
        folder = path if arch_dir is None else arch_dir
        files = [Path(found) for found in expand_sources([str(folder)])]
        if files == [folder]:  # a file or a v2 store
            sources.append(Source(text, path))
            continue
        sources += [Source(str(f.relative_to(folder)), f) for f in files]
        if arch_dir is not None:
            described[text] = f"{arch_dir} ({len(files)} vLLM tuner caches)"
    labels = [s.label for s in sources]
    if len(set(labels)) < len(labels):  # rank files of two directories: name them in full
        sources = [Source(str(s.path), s.path) for s in sources]
    return sources, described
