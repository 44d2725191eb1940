"""A stand-in for docker / podman (stdlib only): `run`, `stop`, `rm`, `ps`, `inspect` as docker answers them,
with the containers' state as JSON files in $FAKE_CONTAINER_STATE.

`run` (attached, like `docker run` without -d) starts the container's command as a real child process in a
session of its own (a container's processes are not in its client's process group), with only the image's
environment ($FAKE_CONTAINER_STATE/image_env.json) and the variables passed by `--env NAME` (the value from
this client's environment) or `--env NAME=VALUE`; it passes SIGTERM, SIGINT and SIGHUP on to the container
(docker's --sig-proxy) and exits with the container's code (128 + the signal when killed). A mounted path that
does not exist is refused, as podman does. `stop -t N` sends SIGTERM, then SIGKILL to the container's whole
process group after N s, as docker does to the container's cgroup; `rm -f` kills it and forgets it. Every
call's argv is appended to calls.jsonl, for tests that look at what reached the runtime.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

_VALUE_OPTIONS = {
    "--name", "--label", "-l", "--env", "-e", "--volume", "-v", "--ipc", "--network", "--publish", "-p",
    "--runtime", "--gpus", "--device", "--entrypoint",
}  # fmt: skip


def state_dir() -> Path:
    path = Path(os.environ["FAKE_CONTAINER_STATE"])
    (path / "containers").mkdir(parents=True, exist_ok=True)
    return path


def _write(record: dict[str, Any]) -> None:
    path = state_dir() / "containers" / f"{record['Id']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)


def _records() -> list[dict[str, Any]]:
    out = []
    for path in sorted((state_dir() / "containers").glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        record["State"]["Running"] = _running(record)
        out.append(record)
    return out


def _running(record: dict[str, Any]) -> bool:
    pid = record["State"].get("Pid", 0)
    if not record["State"].get("Running") or not pid:
        return False
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[19]) == record["State"].get("StartTicks")


def _find(ref: str) -> dict[str, Any] | None:
    for record in _records():
        if record["Name"] == "/" + ref or record["Id"].startswith(ref):
            return record
    return None


def _run(args: list[str]) -> int:
    opts: dict[str, list[str]] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        flag = args[i]
        if flag not in _VALUE_OPTIONS or i + 1 >= len(args):
            print(f"unknown flag: {flag}", file=sys.stderr)
            return 125
        opts.setdefault(flag, []).append(args[i + 1])
        i += 2
    if i >= len(args) or (i + 1 >= len(args) and "--entrypoint" not in opts):
        print('"run" requires an image and a command', file=sys.stderr)
        return 125
    image, command = args[i], args[i + 1 :]
    # The fake images have no entrypoint of their own: --entrypoint is the program.
    command = [*opts.get("--entrypoint", [])[-1:], *command]
    name = (opts.get("--name") or [uuid.uuid4().hex[:12]])[-1]
    if _find(name) is not None:
        print(f'Error: Conflict. The container name "/{name}" is already in use', file=sys.stderr)
        return 125
    for volume in opts.get("--volume", []) + opts.get("-v", []):
        if not Path(volume.split(":")[0]).exists():
            print(f"Error: statfs {volume.split(':')[0]}: no such file or directory", file=sys.stderr)
            return 125
    env = (
        json.loads((state_dir() / "image_env.json").read_text())
        if (state_dir() / "image_env.json").exists()
        else {}
    )
    for item in opts.get("--env", []) + opts.get("-e", []):
        key, sep, value = item.partition("=")
        if sep:
            env[key] = value
        elif key in os.environ:
            env[key] = os.environ[key]
    labels = dict(label.partition("=")[::2] for label in opts.get("--label", []) + opts.get("-l", []))
    record: dict[str, Any] = {
        "Id": uuid.uuid4().hex + uuid.uuid4().hex,
        "Name": "/" + name,
        "Config": {
            "Image": image,
            "Cmd": command,
            "Labels": labels,
            "Env": [f"{k}={v}" for k in env for v in [env[k]]],
        },
        "HostConfig": {"Binds": opts.get("--volume", []), "IpcMode": (opts.get("--ipc") or [""])[-1]},
        "State": {"Running": False, "Pid": 0, "ExitCode": 0, "Status": "created"},
    }
    _write(record)
    child = subprocess.Popen(command, env=env, start_new_session=True)
    ticks = int(Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    record["State"].update(Running=True, Pid=child.pid, StartTicks=ticks, Status="running")
    _write(record)

    def proxy(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, proxy)
    code = child.wait()
    code = 128 - code if code < 0 else code
    if (state_dir() / "containers" / f"{record['Id']}.json").exists():  # not removed meanwhile
        record["State"].update(Running=False, Pid=0, ExitCode=code, Status="exited")
        _write(record)
    return code


def _kill_group(record: dict[str, Any], sig: int) -> None:
    if _running(record):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record["State"]["Pid"], sig)


def _wait_gone(record: dict[str, Any], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _running(record):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _each_container(refs: list[str], act: Callable[[str, dict[str, Any]], bool]) -> int:
    """`act` on each named container, printing its name where it succeeded, as docker stop and rm do; 1
    where a container is missing or `act` refused one."""
    code = 0
    for ref in refs:
        record = _find(ref)
        if record is None:
            print(f"Error response from daemon: No such container: {ref}", file=sys.stderr)
            code = 1
        elif act(ref, record):
            print(ref)
        else:
            code = 1
    return code


def _stop(args: list[str]) -> int:
    seconds = 10.0
    if args[:1] in (["-t"], ["--time"]):
        seconds, args = float(args[1]), args[2:]

    def stop(ref: str, record: dict[str, Any]) -> bool:
        if _running(record):
            os.kill(record["State"]["Pid"], signal.SIGTERM)  # to the container's first process only
            if not _wait_gone(record, seconds):
                _kill_group(record, signal.SIGKILL)
                _wait_gone(record, 10.0)
        return True

    return _each_container(args, stop)


def _rm(args: list[str]) -> int:
    force = bool(args) and args[0] in ("-f", "--force")

    def remove(ref: str, record: dict[str, Any]) -> bool:
        if _running(record):
            if not force:
                print(f"Error: cannot remove container {ref}: container is running", file=sys.stderr)
                return False
            _kill_group(record, signal.SIGKILL)
            _wait_gone(record, 10.0)
        (state_dir() / "containers" / f"{record['Id']}.json").unlink(missing_ok=True)
        return True

    return _each_container(args[1:] if force else args, remove)


def _ps(args: list[str]) -> int:
    every = "-a" in args or "--all" in args
    quiet = "-q" in args or "--quiet" in args
    filters = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--filter"]
    for record in _records():
        if not every and not record["State"]["Running"]:
            continue
        labels = record["Config"]["Labels"]
        wanted = [f.partition("=")[2] for f in filters if f.startswith("label=")]
        if not all(
            (
                w.partition("=")[0] in labels
                and (not w.partition("=")[1] or labels[w.partition("=")[0]] == w.partition("=")[2])
            )
            for w in wanted
        ):
            continue
        print(record["Id"] if quiet else f"{record['Id'][:12]} {record['Name'][1:]}")
    return 0


def _inspect(args: list[str]) -> int:
    found, code = [], 0
    for ref in args:
        record = _find(ref)
        if record is None:
            print(f"Error: No such object: {ref}", file=sys.stderr)
            code = 1
        else:
            found.append(record)
    print(json.dumps(found, indent=1))
    return code


def main(argv: list[str]) -> int:
    with open(state_dir() / "calls.jsonl", "a") as log:
        log.write(json.dumps(argv) + "\n")
    verbs = {"run": _run, "stop": _stop, "rm": _rm, "ps": _ps, "inspect": _inspect}
    if not argv or argv[0] not in verbs:
        print(f"unknown command: {argv[:1]}", file=sys.stderr)
        return 125
    return verbs[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
