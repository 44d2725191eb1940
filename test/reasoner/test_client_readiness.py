"""Readiness on any OpenAI-compatible server (ReasonerClient.health): vLLM's /health where the server has it,
else /v1/models, decided per server and asked again after an outage; the grammar check keeps working."""

from __future__ import annotations

import threading

import pytest
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.errors import GrammarError, ServerError, ServerUnavailable
from cosmos_reasoner_ros.reasoner.client import NO_HEALTH_ROUTE, ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import ChatRequest, RequestSettings, build_request
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog

REQUEST = ChatRequest(
    messages=[{"role": "user", "content": [{"type": "text", "text": "What next?"}]}],
    params={"temperature": 0.6, "max_tokens": 64, "extra_body": {"top_k": 20}},
)


def _client(server: ScriptedServer, **kwargs: object) -> ReasonerClient:
    settings: dict[str, object] = {"base_url": server.base_url, "backoff_s": 0.02, "read_timeout_s": 10.0}
    return ReasonerClient(ClientSettings(**(settings | kwargs)))  # type: ignore[arg-type]


def test_a_vllm_server_is_ready_by_its_health_route_alone() -> None:
    with ScriptedServer() as server, _client(server) as client:
        assert client.health() is True
        server.health_status = 503  # loading: /health says so, whatever /v1/models would say
        assert client.health() is False
        assert client.readiness_url == server.url + "/health"
        assert set(server.get_paths) == {"/health"}


@pytest.mark.parametrize("status", NO_HEALTH_ROUTE)
def test_a_server_without_health_is_ready_by_its_model_list(status: int) -> None:
    """Before: a server with the OpenAI endpoints only answered 404 on /health and was never ready."""
    with ScriptedServer() as server, _client(server) as client:
        server.no_health = status
        assert client.health() is True
        client.wait_ready(1.0)  # at once: it was "not healthy after 10.0 s" before
        assert client.readiness_url == server.base_url + "/models"
        assert server.get_paths[:2] == ["/health", "/v1/models"]
        assert server.get_paths[2:] == ["/v1/models"]  # decided: /health is not asked again while it is up
        assert client.complete(REQUEST).finish_reason == "stop"


def test_a_model_list_that_fails_is_not_ready_and_health_is_asked_again() -> None:
    with ScriptedServer() as server, _client(server) as client:
        server.no_health = 404
        assert client.health() is True
        server.models_status = 503  # down (or loading): not ready, and the next probe starts at /health
        assert client.health() is False
        with pytest.raises(ServerUnavailable, match=r"not healthy after 0\.2 s"):
            client.wait_ready(0.2, poll_s=0.05)
        server.get_paths.clear()
        threading.Timer(0.2, lambda: setattr(server, "models_status", 200)).start()
        client.wait_ready(3.0, poll_s=0.05)
        assert server.get_paths[0] == "/health" and server.get_paths[-1] == "/v1/models"
        # The server that came back has /health now (a vLLM in its place): it is read there again.
        server.models_status = 503
        assert client.health() is False
        server.no_health, server.models_status = 0, 200
        server.get_paths.clear()
        assert client.health() is True and server.get_paths == ["/health"]


def test_an_unreachable_server_is_not_ready() -> None:
    from support.processes import free_port

    with _client_at(f"http://127.0.0.1:{free_port()}/v1") as client:
        assert client.health() is False
        assert client.readiness_url.endswith("/health")


def _client_at(url: str) -> ReasonerClient:
    return ReasonerClient(ClientSettings(base_url=url, health_timeout_s=0.5))


def _structured() -> ChatRequest:
    rendered = TaskCatalog.load().render("temporal_localization", object="the cup")
    return build_request(rendered, [], RequestSettings(structured_output=True))


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "unstreamed"])
def test_the_grammar_check_reads_readiness_from_the_model_list(stream: bool) -> None:
    """A structured request's HTTP 500 before its first token is its grammar while the server is ready, its
    own failure (retried) while not, on a server without /health as on vLLM."""
    server = ScriptedServer(default=ScriptedReply(status=500, error_message="engine died"))
    with server, _client(server, max_retries=2, model="scripted") as client:
        server.no_health = 404
        server.models_status = 503
        with pytest.raises(ServerError, match="engine died") as info:
            client.complete(_structured(), stream=stream)
        assert info.value.kind == "server_error" and server.request_count == 3  # retried, as a plain one
        server.models_status = 200
        with pytest.raises(GrammarError):
            client.complete(_structured(), stream=stream)
        assert server.request_count == 4
