"""One verb of `cosmos-reasoner-bag` run in this process with the invariants of the generated-recordings tests
(test/bag/verbs/test_generated_recordings.py, bench/bag_generated.py) checked around it: an exit code of 0, 1
or 2 with a message, never a traceback; nothing written outside the output folder (the folder of the inputs,
its neighbours, the working directory and the temporary directory as they were); nothing under that folder
read outside the inputs named and the output (an audit hook sees every open, listing and sqlite3 connection
of this process; a decoy recording beside the input is never touched)."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cosmos_reasoner_ros.bag.cli import main

_SEEN: list[str] | None = None  # paths opened or listed in this process while a verb runs


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _SEEN is not None and event in ("open", "os.listdir", "os.scandir", "sqlite3.connect") and args:
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            _SEEN.append(os.path.abspath(os.fsdecode(path)))


sys.addaudithook(_audit)


@dataclass
class Ran:
    rc: int
    out: str
    err: str


def _tree(root: Path, skip: set[Path]) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file and folder under root, the folders in `skip` left out."""
    found = {}
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(here, d) not in skip]
        for name in [*files, *dirs]:
            st = os.lstat(os.path.join(here, name))
            found[os.path.relpath(os.path.join(here, name), root)] = (st.st_size, st.st_mtime_ns)
    return found


@contextlib.contextmanager
def _sandbox(root: Path) -> Iterator[Path]:
    """A fresh temporary directory and working directory under root for one verb; both empty after."""
    tmp, cwd = root / "tmp", root / "cwd"
    tmp.mkdir()
    cwd.mkdir()
    previous_tmp, previous_cwd = tempfile.tempdir, os.getcwd()
    tempfile.tempdir = str(tmp)
    os.chdir(cwd)
    try:
        yield tmp
    finally:
        os.chdir(previous_cwd)
        tempfile.tempdir = previous_tmp
    assert not list(tmp.iterdir()), f"left in the temporary directory: {list(tmp.iterdir())}"
    assert not list(cwd.iterdir()), f"written into the working directory: {list(cwd.iterdir())}"


def run_verb(argv: list[str], root: Path, inputs: list[Path], out: Path | None) -> Ran:
    """`cosmos-reasoner-bag ARGV` in this process; `root` holds the inputs (and the output folder `out`),
    and nothing else of it may be read or written."""
    global _SEEN
    (root / "decoy").mkdir(exist_ok=True)
    decoy_file = root / "decoy" / "secret.mcap"
    decoy_file.write_bytes(b"\x89MCAP0\r\nnot to be read")
    before = _tree(root, {out} if out else set())
    stdout, stderr = io.StringIO(), io.StringIO()
    _SEEN = []
    try:
        with _sandbox(root), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            rc = main(argv)
    finally:
        seen, _SEEN = _SEEN, None
    ran = Ran(rc, stdout.getvalue(), stderr.getvalue())
    assert "Traceback" not in ran.err and "Traceback" not in ran.out, ran.err[-3000:]
    assert rc in (0, 1, 2), (rc, ran.err[-2000:])
    if rc == 2:
        assert "error:" in ran.err or ran.out.strip(), "exit 2 without a message"
    after = _tree(root, {out} if out else set())
    after = {k: v for k, v in after.items() if not k.startswith(("tmp", "cwd"))}
    before = {k: v for k, v in before.items() if not k.startswith(("tmp", "cwd"))}
    assert after == before, f"written outside the output folder: {set(after.items()) ^ set(before.items())}"
    allowed = [str(p.absolute()) for p in (*inputs, *([out] if out else []), root / "tmp", root / "cwd")]
    strays = [
        p
        for p in seen
        if p.startswith(str(root.absolute()))
        and not any(p == a or p.startswith(a + os.sep) for a in allowed)
        and p != str(root.absolute())
    ]
    assert not strays, f"read outside the inputs named: {strays[:5]}"
    return ran
