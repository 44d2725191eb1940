"""The end of a judged verb (evaluate, scenario): the report folder and JUnit file checked writable before
anything runs, then the JUnit file written, each run's summary printed, and the exit code: 0 when every run
is within its tolerances, 1 when one exceeded a tolerance."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from cosmos_reasoner_ros.bag.errors import BagError, RunFailed
from cosmos_reasoner_ros.errors import ReasonerError

if TYPE_CHECKING:
    from cosmos_reasoner_ros.bag.runs.suite import SuiteRun

__all__ = ["EXIT_CODES", "check_outputs", "epilog", "finish", "judged_main", "junit_on_error"]

EXIT_CODES = (
    "Exit 0: every run within its tolerances. 1: a tolerance exceeded (the summary, verdict.json, the report "
    "and the JUnit file say which). 2: bad input (a bag missing, damaged or without the topics asked for, a "
    "file, an option), said in one line on stderr before anything runs, or a run that stopped before it "
    "could be judged (the JUnit file, written whatever the exit, has it as an error)."
)


def epilog(times: str) -> str:
    """What a judged verb's --help says after its options: where trigger times count from, what is judged
    by default (the shipped tolerances, in their own words), and the exit codes."""
    from cosmos_reasoner_ros.bag.judge.tolerances import load_tolerances

    try:
        judged = load_tolerances().judged()
    except BagError as exc:  # a broken shipped file: --help still works
        judged = f"see config/tolerances.yaml ({exc})"
    return (
        f"{times} By default (config/tolerances.yaml; --tolerances changes only the keys it names) "
        f"{judged} {EXIT_CODES}"
    )


def check_outputs(output: Path, junit: Path | None, media_dir: Path | None = None) -> None:
    """Before anything runs: the report folder, the JUnit file and the folder where the node writes clips
    (--media-dir) can be written."""
    from cosmos_reasoner_ros.bag.safe_paths import writable_file, writable_folder

    writable_folder(output, "report folder")
    if junit is not None:
        writable_file(junit, "JUnit file")
    if media_dir is not None:
        writable_folder(media_dir, "media folder")


def finish(runs: Sequence[SuiteRun], junit: Path | None, failed: RunFailed | None = None) -> int:
    """Write the JUnit file, then print each run's summary; 1 when a tolerance was exceeded. The JUnit file
    comes first: output that cannot be written is exit 2 before any verdict is printed. `failed`: a run that
    stopped with an error after `runs` (the caller raises it: exit 2); the JUnit file has it as an error."""
    from cosmos_reasoner_ros.bag.report.junit import JUnitSuite, write_junit
    from cosmos_reasoner_ros.bag.runs.finish import summary_lines

    written = None
    if junit is not None:
        suites = [
            JUnitSuite(
                run.name,
                run.result.verdict,
                run.seconds,
                (("baseline", run.baseline),) if run.baseline else (),
            )
            for run in runs
        ]
        if failed is not None:
            suites.append(JUnitSuite(failed.run, None, error=str(failed)))
        try:
            written = write_junit(junit, suites)
        except OSError as exc:
            raise BagError(f"cannot write the JUnit file {junit}: {exc.strerror or exc}") from None
    for run in runs:
        for line in summary_lines(run.result, run.name if len(runs) > 1 else ""):
            print(line)
    if written is not None:
        print(f"junit: {written}")
    return 0 if all(run.result.verdict.passed for run in runs) else 1


def judged_main(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A judged verb's `main`: `run`, whose bad input leaves the JUnit file (junit_on_error)."""

    @functools.wraps(run)
    def main(args: argparse.Namespace) -> int:
        with junit_on_error(args.junit, args.output.name):
            return run(args)

    return main


@contextmanager
def junit_on_error(junit: Path | None, run: str) -> Iterator[None]:
    """Every exit 2 of a judged verb leaves its JUnit file when --junit is given, as --help promises: bad
    input found before anything runs (a labels file, a sweep value, an unknown task) is one test case in error
    naming the cause. A run that stopped (RunFailed) was written by `finish`, beside the runs before it."""
    try:
        yield
    except RunFailed:
        raise
    except (BagError, ReasonerError, ValueError) as exc:
        if junit is not None:
            _write_error(junit, run, str(exc))
        raise


def _write_error(junit: Path, run: str, error: str) -> None:
    from cosmos_reasoner_ros.bag.report.junit import JUnitSuite, write_junit
    from cosmos_reasoner_ros.bag.safe_paths import writable_file

    try:
        writable_file(junit, "JUnit file")
        write_junit(junit, [JUnitSuite(run, None, error=f"bad input: {error}")])
    except (BagError, OSError):
        pass  # the JUnit file itself cannot be written: stderr already says why the verb stopped
