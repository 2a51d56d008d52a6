"""``import fi_patches.auto``: apply the default pin table (``FI_PATCHES_PINS``) for the life of
the process, whether FlashInfer is imported before or after. ``fi_patches.disable()`` undoes it.
The ``FI_PATCHES_AUTO=1`` start-up hook (:mod:`fi_patches.startup`) does the same when
FlashInfer is imported, without importing this module at interpreter start."""

from fi_patches.activation import enable

enable()
