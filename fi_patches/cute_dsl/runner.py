"""FlashInfer's ``cute-dsl`` MXFP8 runner as ``mm_mxfp8`` builds it, one per device and output
dtype (0.7.4 caches its factory; earlier releases build a new runner per call)."""

from __future__ import annotations

import functools
from typing import Any

from fi_patches.internals import flashinfer as fi


@functools.lru_cache(maxsize=32)
def cute_dsl_runner(sm_major: int, sm_minor: int, out_dtype: Any) -> Any:
    """The runner ``mm_mxfp8(backend="cute-dsl")`` tunes, with PDL, for ``out_dtype``."""
    return fi.cute_dsl_runner(sm_major, sm_minor, True, out_dtype)


workspace_helper = fi.workspace_helper
workspace = fi.workspace
