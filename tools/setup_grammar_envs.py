"""Install each grammar backend version of requirements-grammar.txt on its own, for the schema compile check.

usage: python tools/setup_grammar_envs.py [--python PY] [--out DIR]

- Each pinned line (`xgrammar==0.2.8`, `llguidance==1.7.6`, ...) goes, --no-deps, into DIR/<name>-<version>
  (default .cache/grammar-backends): 4-115 MB each, no environment of its own. The check runs .venv-vllm's
  Python (torch, transformers and the tokenizer libraries every backend version imports) with that directory
  first on PYTHONPATH, where it shadows .venv-vllm's own xgrammar and llguidance.
- A stamp per directory (a hash of its line and this script) makes a second run instant; a changed or new
  line installs only that version; directories of versions no longer listed are removed.
- Needs .venv-vllm (./run setup-vllm); without it there is nothing to do, and the check skips saying so.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements-grammar.txt"
DEFAULT_OUT = ROOT / ".cache" / "grammar-backends"
STAMP = ".cosmos-reasoner-stamp"
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+-]+)$")
# Variables of the ROS environment that must not reach the vLLM environment's Python.
FOREIGN_ENV = ("_ROS_WHEELS_BOOTSTRAP_COMPLETE", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def log(msg: str) -> None:
    print(f"[setup-grammar] {msg}", file=sys.stderr, flush=True)


def pins(path: Path = REQUIREMENTS) -> list[tuple[str, str]]:
    """(name, version) of every pinned line, comments and blank lines aside."""
    found = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.match(line)
        if not match:
            raise SystemExit(f"{path}:{number}: expected NAME==VERSION, got {line!r}")
        found.append((match.group(1).lower(), match.group(2)))
    return found


def target(out: Path, name: str, version: str) -> Path:
    return out / f"{name}-{version}"


def stamp_of(name: str, version: str) -> str:
    digest = hashlib.sha256(f"{name}=={version}\n".encode())
    digest.update(Path(__file__).resolve().read_bytes())
    return digest.hexdigest()[:16]


def install(python: Path, out: Path, name: str, version: str) -> bool:
    """Install one version (True) unless its stamp says it is there (False)."""
    where = target(out, name, version)
    want = stamp_of(name, version)
    stamp = where / STAMP
    if stamp.exists() and stamp.read_text().strip() == want:
        return False
    shutil.rmtree(where, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--target",
            str(where),
            f"{name}=={version}",
        ],
        env=env,
        check=True,
    )
    stamp.write_text(want + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_python = (
        Path(os.environ.get("COSMOS_REASONER_VLLM_VENV") or ROOT / ".venv-vllm") / "bin" / "python"
    )
    parser.add_argument("--python", type=Path, default=default_python, help="the Python that runs the check")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not args.python.exists():
        log(f"no {args.python}: nothing to set up (./run setup-vllm first)")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = pins()
    start = time.monotonic()
    installed = [f"{n}=={v}" for n, v in wanted if install(args.python, args.out, n, v)]
    keep = {target(args.out, n, v).name for n, v in wanted}
    for stale in args.out.iterdir():
        if stale.is_dir() and stale.name not in keep:
            shutil.rmtree(stale, ignore_errors=True)
    if installed:
        log(f"installed {', '.join(installed)} in {time.monotonic() - start:.0f} s into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
