"""fi_patches inside SGLang: the ``sglang.srt.plugins`` entry point (:mod:`.plugin`), its
settings and its self-check."""
