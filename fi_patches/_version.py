"""fi_patches' version (pyproject.toml's), in a leaf that any module reads without importing the
package's face."""

VERSION = "0.1.0"
__version__ = VERSION
