"""The server checked before any bag plays (issue 38): generated server behaviours (down, 500 or 503 on
/health, no /health route with /v1/models ready or still loading, slow to come up within the run's
wait_for_server_s or not) against the expected exit code, through `scenario` (its variants' servers checked
before the first run) and `evaluate` (after every bag is prepared, before any node starts). Reaching the
replay is the tripwire: "it replayed"."""

from __future__ import annotations

import socket
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.scripted_server import ScriptedServer

from cosmos_reasoner_ros.bag import cli
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.replay import evaluate as evaluate_module
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
from cosmos_reasoner_ros.bag.replay.reachability import check_server, server_target
from cosmos_reasoner_ros.bag.runs import suite


class Replayed(Exception):
    """The tripwire: the verb went on to replay."""


def _tripwire(*_args: object, **_kwargs: object) -> None:
    raise Replayed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A behaviour: (what the server does, the seconds it takes to become ready; None: never, 0: at once).
BEHAVIOURS = {
    "up": 0.0,
    "no_health_route_models_ready": 0.0,  # an OpenAI-only server: /health 404/405/501, /v1/models lists one
    "health_500": None,
    "health_503": None,
    "no_health_route_models_loading": None,  # /v1/models 503
    "down": None,  # nothing listens
    "slow_up": 3.0,  # /health 503, then 200 after 3 s (after the verb's own checks, even on a loaded machine)
}


@contextmanager
def behaving(kind: str, route_status: int) -> Iterator[str]:
    """A base URL whose server behaves as `kind`."""
    if kind == "down":
        yield f"http://127.0.0.1:{_free_port()}/v1"
        return
    with ScriptedServer() as server:
        timer = None
        if kind.startswith("no_health_route"):
            server.no_health = route_status
            server.models_status = 200 if kind.endswith("ready") else 503
        elif kind in ("health_500", "health_503", "slow_up"):
            server.health_status = 500 if kind == "health_500" else 503
        if kind == "slow_up":
            timer = threading.Timer(BEHAVIOURS["slow_up"] or 0.0, setattr, (server, "health_status", 200))
            timer.start()
        try:
            yield server.base_url
        finally:
            if timer is not None:
                timer.cancel()


def _ready_within(kind: str, wait_s: float) -> bool:
    """The oracle: the server answers as ready within the wait (with a margin for a loaded machine)."""
    ready_after = BEHAVIOURS[kind]
    return ready_after is not None and (ready_after == 0.0 or ready_after + 2.0 <= wait_s)


def _error_case(junit: Path) -> str:
    errors = list(ET.parse(junit).getroot().iter("error"))
    assert len(errors) == 1
    return errors[0].get("message", "") + (errors[0].text or "")


def _suite(root: Path, server_url: str, wait_s: float) -> Path:
    (root / "bags" / "one").mkdir(parents=True, exist_ok=True)
    (root / "bags" / "one" / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    path = root / "s.yaml"
    path.write_text(
        "bags: [bags/one]\ngoals: [{task: next_action, at: 1}]\n"
        f"params: {{server_url: '{server_url}', wait_for_server_s: {wait_s}}}\n"
    )
    return path


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(BEHAVIOURS)),
    route_status=st.sampled_from([404, 405, 501]),
    wait_s=st.sampled_from([0.0, 6.0]),
)
@example(kind="slow_up", route_status=404, wait_s=6.0)  # comes up within the wait: passes
@example(kind="slow_up", route_status=404, wait_s=0.0)  # asked once, not yet ready: exit 2
@example(kind="no_health_route_models_ready", route_status=404, wait_s=0.0)
@example(kind="health_500", route_status=404, wait_s=0.0)
def test_a_scenario_replays_only_when_its_server_is_ready(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    route_status: int,
    wait_s: float,
) -> None:
    monkeypatch.setattr(suite, "run_scenario", _tripwire)
    root = tmp_path_factory.mktemp("reach")
    junit = root / "junit.xml"
    with behaving(kind, route_status) as url:
        argv = ["scenario", str(_suite(root, url, wait_s)), "-o", str(root / "out"), "--junit", str(junit)]
        if _ready_within(kind, wait_s):
            with pytest.raises(Replayed):
                cli.main(argv)
            assert not junit.exists()
        else:
            assert cli.main(argv) == 2
            message = _error_case(junit)
            assert "is not ready" in message and "wait_for_server_s" in message
            assert url.removesuffix("/v1") in message


def test_the_url_is_shown_without_credentials_and_the_wait_is_the_runs() -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    options = EvalOptions(server_url="http://ignored:1/v1", params=(f"server_url:={url}",))
    target = server_target(options)
    assert (target.url, target.wait_s, target.api_key_env) == (url, 10.0, "COSMOS_REASONER_API_KEY")
    quick = EvalOptions(server_url=url, params=("wait_for_server_s:=0", "api_key_env:=MY_KEY"))
    assert (server_target(quick).wait_s, server_target(quick).api_key_env) == (0.0, "MY_KEY")
    with pytest.raises(BagError, match="is not ready"):
        check_server(quick)
    with pytest.raises(BagError, match="wait_for_server_s must be a number of seconds"):
        server_target(EvalOptions(server_url=url, params=("wait_for_server_s:=-1",)))


@pytest.fixture(scope="module")
def small_bag(robot_clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag

    bag = tmp_path_factory.mktemp("reach_bag") / "robot"
    make_bag([robot_clip], bag, MakeOptions(rate_hz=5.0, max_long_side=160))
    return bag


@pytest.mark.ros
@pytest.mark.parametrize("kind", ["down", "up"])
def test_evaluate_checks_the_server_after_the_bags_before_any_node(
    small_bag: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setattr(evaluate_module, "BagRun", _tripwire)
    junit = tmp_path / "junit.xml"
    with behaving(kind, 404) as url:
        argv = ["evaluate", str(small_bag), "-o", str(tmp_path / "out"), "--server-url", url, "--at", "2"]
        argv += ["-p", "wait_for_server_s:=0.5", "--junit", str(junit), "--no-progress"]
        if kind == "up":
            with pytest.raises(Replayed):
                cli.main(argv)
        else:
            assert cli.main(argv) == 2
            assert "is not ready" in _error_case(junit)
            assert not (tmp_path / "out" / "node.log").exists()  # no node was started
