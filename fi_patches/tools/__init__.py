"""Tooling the serving runtime never imports: the lockfile tools and the wide tile's diagnostics."""
