"""A stream ends when its answer does: once every choice has its finish reason, whatever the server sends or
withholds after it (a usage chunk, `[DONE]`, garbage, an error event, more text, nothing at all, a hang, a
close; slowly or at once) never discards the answer. The client waits at most STREAM_TAIL_S for the usage
chunk, then closes the connection; the server sees it closed and no thread is left reading."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.processes import wait_until
from support.scripted_server import AFTER_FINISH_STEPS, ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.reasoner.client import STREAM_TAIL_S, ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import ChatRequest

REQUEST = ChatRequest(
    messages=[{"role": "user", "content": [{"type": "text", "text": "What next?"}]}],
    params={"max_tokens": 64},
)
TEXT = '```json\n[{"point_2d": [10, 20]}]\n```'
USAGE = (100, len(TEXT.split()))  # the scripted server's usage chunk: prompt tokens, one token per word
# The tail's bound, with room for a loaded machine; far below the 10 s of the pace floor that used to end a
# finished answer whose server neither closed nor sent `[DONE]`.
LIMIT_S = STREAM_TAIL_S + 3.0
FAST, SLOW = 0.02, STREAM_TAIL_S + 1.5  # a step's delay: well within the tail's bound, or well past it
EXAMPLES = int(os.environ.get("COSMOS_GENERATED_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


def _client(server: ScriptedServer) -> ReasonerClient:
    return ReasonerClient(
        ClientSettings(
            base_url=server.base_url,
            model="scripted",
            max_retries=0,
            read_timeout_s=60.0,  # silence never decides here
            first_token_timeout_s=5.0,
            min_tokens_per_s=1.0,
            progress_window_s=10.0,  # the floor that used to cut a finished answer after 10 s
        )
    )


def _request_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "reasoner-request"]


def _pool_connections(client: ReasonerClient) -> int:
    return len(client._sdk._client._transport._pool.connections)  # type: ignore[attr-defined]


def expected_usage(steps: tuple[str, ...], delay_s: float) -> set[tuple[int, int]]:
    """The token counts the answer may carry: the server's when its usage chunk comes within the bound before
    anything that ends the SDK's reading (`[DONE]`, garbage, an error event); (0, 0), unknown, otherwise."""
    for before, step in enumerate(steps, 1):
        if step == "usage":
            if delay_s * before <= FAST * len(AFTER_FINISH_STEPS):
                return {USAGE}
            return {(0, 0)} if delay_s >= SLOW else {USAGE, (0, 0)}
        if step in ("done", "garbage", "error", "hang"):
            break
    return {(0, 0)}


def _ask(server: ScriptedServer, reply: ScriptedReply) -> None:
    server.default = reply
    before = server.disconnects + server._httpd.clients_gone
    with _client(server) as client:
        start = time.monotonic()
        completion = client.complete(REQUEST)
        took = time.monotonic() - start
        # The answer whose choice finished, exactly; nothing that came after its finish.
        assert (completion.text, completion.finish_reason) == (TEXT, "stop")
        counts = (completion.prompt_tokens, completion.completion_tokens)
        steps = ("usage", "done") if reply.after_finish is None else reply.after_finish  # None: as vLLM
        assert counts in expected_usage(steps, reply.after_finish_delay_s)
        assert took < LIMIT_S, f"{took:.2f} s after {reply.after_finish}"
        # The rest of the stream is dropped with its connection: none left in the pool, none reading.
        wait_until(lambda: not _request_threads(), 10, "the request's worker thread to end")
        wait_until(lambda: _pool_connections(client) == 0, 10, "the pool to release the connection")
    if "hang" in (reply.after_finish or ()):
        gone = lambda: server.disconnects + server._httpd.clients_gone > before  # noqa: E731
        wait_until(gone, 10, "the server to see the connection closed")


@pytest.mark.parametrize(
    "steps",
    [("hang",), ("usage", "hang"), (), ("usage",), ("garbage",), ("error",), ("text", "done")],
    ids=["hang", "usage-hang", "close", "usage-close", "garbage", "error", "text-done"],
)
def test_a_finished_answer_is_kept_whatever_follows(server: ScriptedServer, steps: tuple[str, ...]) -> None:
    """Issue 37, finding 8: the last token with `finish_reason: stop`, then neither `[DONE]` nor a close,
    ended `too_slow` after 10 s, success false."""
    _ask(server, ScriptedReply(text=TEXT, after_finish=steps))


def test_vllm_order_keeps_the_usage(server: ScriptedServer) -> None:
    """vLLM with include_usage: finish chunk, usage chunk, `[DONE]`: the server's counts are kept."""
    _ask(server, ScriptedReply(text=TEXT, after_finish=("usage", "done")))
    _ask(server, ScriptedReply(text=TEXT))  # the default reply: the same order


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(st.sampled_from(AFTER_FINISH_STEPS), max_size=4).map(tuple),
    delay_s=st.sampled_from([0.0, 0.0, FAST, SLOW]),
)
@example(steps=("hang",), delay_s=0.0)
@example(steps=("usage", "hang"), delay_s=SLOW)
@example(steps=("text", "usage", "hang"), delay_s=FAST)
@example(steps=("garbage", "usage"), delay_s=0.0)
def test_generated_tails_keep_the_finished_answer(
    server: ScriptedServer, steps: tuple[str, ...], delay_s: float
) -> None:
    _ask(server, ScriptedReply(text=TEXT, after_finish=steps, after_finish_delay_s=delay_s))
