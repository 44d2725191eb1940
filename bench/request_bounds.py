"""How long a request lasts against slow and hostile servers: the client with the node's default bounds, and
before (the bare openai SDK with the read timeout alone, which is what the client's worker did), side by side
in one run; and that slow but working servers (a CPU vLLM at a few tokens/s, a long prefill) are never cut.

Settings as the issue's probe: request_timeout_s 5 (the SDK's read timeout), max_tokens 4096 (the shipped
reasoning profile); the node's defaults for the rest. A request still running at --cap seconds is stopped
there (reported as such).
Prints the figures as JSON on its last line and writes them to bench/results/request_bounds.json.
    ./run exec python bench/request_bounds.py [--cap 60]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

import openai
from support.paths import BENCH_RESULTS
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.errors import ReasonerError, RequestCancelled
from cosmos_reasoner_ros.node.parameters import PARAMETERS
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import ChatRequest

RESULT = BENCH_RESULTS / "request_bounds.json"
REQUEST = ChatRequest(
    messages=[{"role": "user", "content": [{"type": "text", "text": "What next?"}]}],
    params={"max_tokens": 4096},
)
WORDS = "word " * 5000
HOSTILE = {
    "trickle: a token every 2 s": ScriptedReply(text=WORDS, chunk_delay_s=2.0),
    "SSE comments only": ScriptedReply(keepalive_s=3600, keepalive_interval_s=1.0),
    "headers a byte every 0.5 s": ScriptedReply(header_byte_delay_s=0.5),
    "a byte of the body every 1 s": ScriptedReply(body_byte_delay_s=1.0),
    "40 MiB answer": ScriptedReply(huge_answer_bytes=40 << 20),
}
WORKING = {
    "CPU-like: 3 tokens/s for 60 tokens": ScriptedReply(text="word " * 60, chunk_delay_s=1 / 3),
    "long prefill: first token after 20 s": ScriptedReply(text="word " * 20, first_token_delay_s=20.0),
    "GPU-like: 150 tokens/s for 3,000 tokens": ScriptedReply(text="word " * 3000, chunk_delay_s=1 / 150),
}


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _measure(reply: ScriptedReply, ask: Any, cap_s: float) -> dict[str, object]:
    """Run `ask(base_url, cancel)` against a server with this reply: (kind, answer characters) it returns,
    how long it took, the peak RSS growth; stopped at cap_s."""
    with ScriptedServer(default=reply) as server:
        cancel = threading.Event()
        timer = threading.Timer(cap_s, cancel.set)
        timer.start()
        Path("/proc/self/clear_refs").write_text("5")  # peak RSS from here
        rss_before = _peak_rss_mib()
        start = time.monotonic()
        kind, chars = ask(server.base_url, cancel)
        took = time.monotonic() - start
        timer.cancel()
        if cancel.is_set():
            kind = f"still running at the cap ({cap_s:g} s)"
        return {
            "kind": kind,
            "seconds": round(took, 2),
            "answer_chars": chars,
            "peak_rss_growth_mib": round(_peak_rss_mib() - rss_before, 1),
        }


def _client(settings: ClientSettings, stream: bool) -> Any:
    def ask(base_url: str, cancel: threading.Event) -> tuple[str, int]:
        with ReasonerClient(ClientSettings(**{**settings.__dict__, "base_url": base_url})) as client:
            try:
                return "success", len(client.complete(REQUEST, stream=stream, cancel=cancel).text)
            except RequestCancelled:
                return "cancelled", 0
            except ReasonerError as err:
                return err.kind, 0

    return ask


def _bare_sdk(read_timeout_s: float, stream: bool) -> Any:
    """Before: the SDK with its read timeout, read to the end (the cap closes the response from outside)."""

    def ask(base_url: str, cancel: threading.Event) -> tuple[str, int]:
        sdk = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=read_timeout_s)
        kwargs: dict[str, Any] = {"model": "scripted", "messages": REQUEST.messages, **REQUEST.params}
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                if not stream:
                    box["text"] = sdk.chat.completions.create(**kwargs).choices[0].message.content or ""
                    return
                with sdk.chat.completions.create(**kwargs, stream=True) as response:
                    box["response"] = response
                    parts = [c.choices[0].delta.content or "" for c in response if c.choices]
                box["text"] = "".join(parts)
            except Exception as err:  # what the old client's worker handed over
                box["error"] = type(err).__name__

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        while worker.is_alive() and not cancel.wait(0.05):
            pass
        if worker.is_alive() and "response" in box:
            box["response"].close()
        sdk.close()
        if "text" in box:
            return "success", len(box["text"])
        return str(box.get("error", "no answer")), 0

    return ask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=float, default=60.0, help="[s] stop a request without bounds here")
    args = parser.parse_args()
    node = {
        name: PARAMETERS[name][0]
        for name in ("first_token_timeout_s", "min_tokens_per_s", "progress_window_s")
    }
    bounded = ClientSettings(max_retries=0, read_timeout_s=5.0, model="scripted", **node)
    results: dict[str, Any] = {"settings": {"request_timeout_s": 5.0, "max_tokens": 4096, **node}}
    results["hostile"], results["working"] = {}, {}
    for name, reply in HOSTILE.items():
        for stream in (True, False):
            label = f"{name}, {'streamed' if stream else 'unstreamed'}"
            row = {
                "now": _measure(reply, _client(bounded, stream), args.cap),
                "before": _measure(reply, _bare_sdk(5.0, stream), args.cap),
            }
            results["hostile"][label] = row
            print(label, json.dumps(row), flush=True)
    # Working servers against the node's defaults throughout (request_timeout_s 120: a 20 s prefill would
    # have outlasted the probe's 5 s read timeout before as well).
    defaults = ClientSettings(
        max_retries=0, read_timeout_s=PARAMETERS["request_timeout_s"][0], model="scripted", **node
    )
    for name, reply in WORKING.items():
        row = _measure(reply, _client(defaults, True), args.cap)
        results["working"][name] = row
        print(name, json.dumps(row), flush=True)
    RESULT.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
