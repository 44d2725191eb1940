"""Whether the run's server answers before any bag plays: the Reasoner client's own readiness request
(`/health`, else `/v1/models` on a server without that route), asked again for up to the run's
`wait_for_server_s` (the wait the replayed node keeps before each request). A server that is down is exit 2
in seconds, not a replay whose every request fails."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.replay.node_process import REPLAY_WAIT_FOR_SERVER_S, node_parameter
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
from cosmos_reasoner_ros.errors import ReasonerError
from cosmos_reasoner_ros.parameters.server_url import shown_url

__all__ = ["ServerTarget", "check_server", "check_servers", "server_target"]

_API_KEY_ENV = "COSMOS_REASONER_API_KEY"  # the node's default (config/reasoner.yaml)


@dataclass(frozen=True)
class ServerTarget:
    """The server a replayed node will call, and how long it waits for it to be ready."""

    url: str
    api_key_env: str
    wait_s: float


def _last_param(options: EvalOptions, name: str) -> tuple[bool, Any]:
    """The last `-p name:=value` of the run (as rcl reads the value), and whether there is one."""
    for item in reversed(options.params):
        key, _, text = item.partition(":=")
        if key.strip() == name:
            try:
                return True, yaml.safe_load(text)
            except yaml.YAMLError:
                return True, text
    return False, None


def server_target(options: EvalOptions) -> ServerTarget:
    """The node's server_url and wait_for_server_s as the replay sets them (node_process.node_parameters:
    the run's -p over the replay's own values, which are over the parameter file), and its api_key_env."""
    given, url = _last_param(options, "server_url")
    url = url if given else options.server_url
    given, wait = _last_param(options, "wait_for_server_s")
    wait = wait if given else REPLAY_WAIT_FOR_SERVER_S
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 86400:
        raise BagError(
            f"node parameter wait_for_server_s must be a number of seconds in 0-86400, got {wait!r}"
        )
    env = node_parameter(options, "api_key_env")
    if not isinstance(url, str):
        raise BagError(f"node parameter server_url must be text, got {type(url).__name__}")
    return ServerTarget(url, env if isinstance(env, str) and env else _API_KEY_ENV, float(wait))


def check_server(options: EvalOptions, where: str = "") -> None:
    """BagError (the URL shown without credentials) when the server does not answer as ready within the
    run's wait_for_server_s; `where` begins the message (a scenario's run)."""
    check_servers([server_target(options)], where)


def check_servers(targets: Iterable[ServerTarget], where: str = "") -> None:
    """Each distinct target once, in order; BagError naming the first that is not ready."""
    from cosmos_reasoner_ros.reasoner import ClientSettings, ReasonerClient

    for target in dict.fromkeys(targets):
        try:
            settings = ClientSettings(base_url=target.url, api_key_env=target.api_key_env)
        except ValueError as exc:
            raise BagError(f"{where}server_url: {exc}") from None
        with ReasonerClient(settings) as client:
            try:
                client.wait_ready(target.wait_s, poll_s=min(0.5, max(0.05, target.wait_s / 10)))
            except ReasonerError:
                raise BagError(
                    f"{where}the server {shown_url(target.url)} is not ready: "
                    f"{shown_url(client.readiness_url)} did not answer as ready within {target.wait_s:g} s "
                    "(wait_for_server_s); start it (docs/SERVING.md), or wait longer with "
                    "-p wait_for_server_s:=SECONDS"
                ) from None
