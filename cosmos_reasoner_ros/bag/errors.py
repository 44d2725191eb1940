"""The bag tools' own errors: a bag or option the user gave is wrong. They never become a ReasonerResult."""

from __future__ import annotations

__all__ = ["BagError", "RunFailed"]


class BagError(Exception):
    """A bag could not be read or written (missing topics, unknown storage, truncated or corrupt file), or a
    bag tool's option is invalid. The command line prints the message and exits with code 2."""


class RunFailed(BagError):
    """One run of several (a scenario, a sweep value) stopped before it could be judged; `run` names it. The
    runs before it are still reported (their JUnit cases beside this one's error), then exit code 2."""

    def __init__(self, run: str, message: str) -> None:
        super().__init__(message)
        self.run = run
