"""The verbs of `cosmos-reasoner-bag`, one small module each (as ros2bag's verb/ folder): check, make, play,
record, evaluate, scenario, report, labels, leaderboard. Every verb module has the same shape:

    HELP: str                                            # one line for the verb list
    def add_arguments(parser: argparse.ArgumentParser) -> None   # its options (and epilog)
    def main(args: argparse.Namespace) -> int            # 0; 1: a tolerance exceeded; 2: found damaged

Bad input is a BagError (or ValueError) raised from `main`: the command line prints its one line and exits
2. The work lies in the rooms below (files, replay, judge, report, runs, labels, scores, leaderboard); a
verb only turns its options into a call and prints what came of it. bag/cli.py registers the verbs (one line
each in cli.VERBS) and turns errors into exit codes: a new verb is a module here and a line there. Shared
here: option groups several verbs take (arguments; scoring_args: labels, thresholds, intervals, text judge),
SIGINT/SIGTERM as a flag (signals), the start and end of a judged run (judged: outputs checked writable,
JUnit written whatever the exit, summaries, its --help epilog). Heavy imports (rclpy, PyAV) happen inside
`main`: `--help` and the verbs that need no ROS start fast and work without it."""

__all__ = [
    "arguments",
    "check",
    "evaluate",
    "judged",
    "labels",
    "leaderboard",
    "make",
    "play",
    "record",
    "report",
    "scenario",
    "scoring_args",
    "signals",
]
