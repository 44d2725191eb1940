"""The stand-in for `vllm` that the server tests supervise, and the installed-distribution metadata that
version detection reads."""

from __future__ import annotations

import textwrap
from pathlib import Path

# A stand-in for `vllm`: `serve MODEL ... --port P`; records its argv and pids, starts a worker child in its
# process group (like vLLM's engine core), then serves /health. `--version` prints FAKE_VLLM_VERSION; with
# FAKE_VLLM_FLAGS (a JSON list) it refuses any other flag the way argparse does. FAKE_VLLM_BEHAVIOUR chooses
# misbehaviours: exit (a different message each time), crash (the same traceback each time), ignore_term,
# never_ready, busy_on_usr1. With FAKE_VLLM_FREEZE_ON_POST (a file name) it stops itself (SIGSTOP) at its
# first POST.
FAKE_VLLM = textwrap.dedent(
    """
    import http.server, json, os, random, signal, string, subprocess, sys, time
    argv = sys.argv[1:]
    if argv == ["--version"]:
        if "FAKE_VLLM_VERSION" not in os.environ:
            sys.exit(1)
        print(os.environ["FAKE_VLLM_VERSION"])
        sys.exit(0)
    allowed = os.environ.get("FAKE_VLLM_FLAGS")
    if allowed is not None:
        unknown = [a for a in argv if a.startswith("--") and a not in json.loads(allowed)]
        if unknown:
            print("usage: vllm serve [model_tag] [options]", file=sys.stderr)
            print("vllm: error: unrecognized arguments: " + " ".join(unknown), file=sys.stderr)
            sys.exit(2)
    port = int(argv[argv.index("--port") + 1])
    record = os.environ["FAKE_VLLM_RECORD"]
    worker = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(600)"])
    with open(record, "a") as f:
        f.write(json.dumps({"argv": argv, "pid": os.getpid(), "worker": worker.pid,
                            "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "TMPDIR",
                                    "VLLM_CACHE_ROOT", "FAKE_EXTRA", "VLLM_API_KEY",
                                    "_ROS_WHEELS_BOOTSTRAP_COMPLETE")}}) + "\\n")
    behaviour = os.environ.get("FAKE_VLLM_BEHAVIOUR", "ok")
    print("fake vllm starting on", port, flush=True)
    if behaviour == "exit":
        print("engine died: " + "".join(random.choices(string.ascii_letters, k=12)), flush=True)
        sys.exit(3)
    if behaviour == "crash":
        print(f"(EngineCore pid={os.getpid()}) ERROR 12-02 10:{random.randint(10, 59)}:00 [core.py:1] failed")
        print("RuntimeError: CUDA error: no kernel image is available for the device", flush=True)
        sys.exit(1)
    if behaviour == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if behaviour == "busy_on_usr1":  # SIGUSR1: silent on /health while burning CPU (a prefill starving it)
        def burn(*args):
            while True:
                pass
        signal.signal(signal.SIGUSR1, burn)
    if behaviour == "never_ready":
        time.sleep(600)
    time.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0")))

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def do_POST(self):
            marker = os.environ.get("FAKE_VLLM_FREEZE_ON_POST")  # the first POST (a warm-up) freezes it
            if marker and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGSTOP)
            self.send_response(501)
            self.end_headers()
        def log_message(self, *args):
            pass

    print("fake vllm ready", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


def fake_dist(site: Path, name: str, version: str) -> None:
    """An installed distribution's metadata, as importlib.metadata finds it on `site`."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
