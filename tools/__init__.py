"""Maintainer scripts run from the checkout (``python -m tools.<name>``); not shipped."""
