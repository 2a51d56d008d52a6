"""fi_patches inside SGLang: the ``sglang.srt.plugins`` entry point, its self-check and its
``doctor`` line (:mod:`.plugin`); its settings are read in :mod:`fi_patches._env`."""
