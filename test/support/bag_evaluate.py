"""bag_evaluate as the replay tests run it: a bag (or folder of bags) replayed against a server's URL, the
report written to a folder, the rest of the command line as each test needs it."""

from __future__ import annotations

from pathlib import Path

from cosmos_reasoner_ros.bag.cli import main


def evaluate(bag: Path, out: Path, server_url: str, *args: str) -> int:
    """`bag evaluate BAG -o OUT --server-url SERVER_URL ARGS...`'s exit code."""
    return main(["evaluate", str(bag), "-o", str(out), "--server-url", server_url, *args])
