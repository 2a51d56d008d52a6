"""fi_patches inside vLLM: a general plugin (:mod:`.plugin`, entry point ``fi_patches`` in the
group ``vllm.general_plugins``) that activates fi_patches in every vLLM process, and the opt-in
routing of vLLM's cute-dsl MXFP8 linear through :func:`fi_patches.mxfp8.mm` (:mod:`.route`).

Importing this package imports neither vLLM, torch nor FlashInfer;
:mod:`fi_patches.internals.vllm` holds every vLLM name the integration uses.
"""
