"""The FlashInfer compat matrix: ``matrix.toml`` declares, per release, what every fi_patches
feature should be on a CPU machine targeting sm_103; ``nox -s matrix`` checks it and writes
``RESULTS.md``. See ``compat/README.md``."""
