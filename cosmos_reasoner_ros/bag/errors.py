"""The bag tools' own errors: a bag or option the user gave is wrong. They never become a ReasonerResult."""

from __future__ import annotations

__all__ = ["BagError"]


class BagError(Exception):
    """A bag could not be read or written (missing topics, unknown storage, truncated or corrupt file), or a
    bag tool's option is invalid. The command line prints the message and exits with code 2."""
