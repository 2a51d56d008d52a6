"""Pinned tactics: FlashInfer's tuner is offered only the pinned tactic for pinned problems."""
