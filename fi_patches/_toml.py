"""The TOML reader: the standard library's ``tomllib`` on Python 3.11+, its backport ``tomli``
(a dependency on 3.10 only) before that. Every module that parses TOML imports it from here."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, load, loads
else:
    from tomli import TOMLDecodeError, load, loads

__all__ = ["TOMLDecodeError", "load", "loads"]
