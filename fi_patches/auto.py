"""``import fi_patches.auto``: apply the default pin table (``FI_PATCHES_PINS``) for the life of
the process, whether FlashInfer is imported before or after. ``fi_patches.disable()`` undoes it.
The ``FI_PATCHES_AUTO=1`` start-up hook and ``fi-patches-run`` import this module."""

from fi_patches.activation import enable

enable()
