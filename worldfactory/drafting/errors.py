"""The drafting layer's own errors: the CLI prints them plainly; the build never sees them."""

from __future__ import annotations


class DraftError(Exception):
    """A free-text brief's pack could not be drafted; the message says why and what to do."""
