"""Run a command while other processes keep the CPUs busy, as on a shared CI runner.

usage: python3 tools/with_cpu_burners.py [--burners 2] -- ./run test

Each burner is a process that spins at normal priority (no nice) until the command ends; the burners are
stopped however the command ends. Prints the command's wall time and passes on its exit code. Issue 21 asks
that `./run test` pass with two such processes beside it on this 2-core machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import time


def burn(parent: int) -> None:
    """Spin until the parent is gone (killed, even by SIGKILL: its burners must not outlive it)."""
    while os.getppid() == parent:
        for _ in range(1_000_000):
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burners", type=int, default=2, help="CPU-burning processes (default 2)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.burners < 0:
        parser.error("give a command after --, and --burners >= 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally: below stops the burners
    burners = [
        multiprocessing.Process(target=burn, args=(os.getpid(),), daemon=True) for _ in range(args.burners)
    ]
    for process in burners:
        process.start()
    start = time.monotonic()
    try:
        code = subprocess.call(command)
    finally:
        for process in burners:
            process.kill()
            process.join()
    print(
        f"[with_cpu_burners] {args.burners} burners, {' '.join(command)}: exit {code} after "
        f"{(time.monotonic() - start) / 60:.1f} min",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
