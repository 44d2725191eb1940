"""The command line's summaries list at most a few items of a kind (exceeded tolerances, losses, what was not
scored): the first ones, then one line saying how many more there are and where to read them."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["capped"]


def capped(lines: Sequence[str], limit: int, more: str) -> list[str]:
    """The first `limit` lines, then `  ... and N {more}` when there are N more."""
    shown = list(lines[:limit])
    if len(lines) > limit:
        shown.append(f"  ... and {len(lines) - limit} {more}")
    return shown
