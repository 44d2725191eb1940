"""parameters.server_url: the one URL rule agrees with an oracle built on urllib.parse over generated URLs
(schemes, credentials, ports, IPv6 hosts, /v1 paths, trailing slashes, garbage); every place that takes a
server URL gives its verdict; and nothing shown of a URL ever holds its password."""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.configs import default_config

from cosmos_reasoner_ros import launch_config
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
from cosmos_reasoner_ros.bag.replay.plan import server_url_problem as replay_url_problem
from cosmos_reasoner_ros.bag.scores.text_judge import JudgeSettings
from cosmos_reasoner_ros.node.parameters import secret_problems, validate
from cosmos_reasoner_ros.parameters.server_url import (
    DEFAULT_SERVER_URL,
    local_server_url,
    normalise_server_url,
    server_root,
    server_url_problem,
    shown_url,
)
from cosmos_reasoner_ros.reasoner import ClientSettings
from cosmos_reasoner_ros.server.errors import ConfigError
from cosmos_reasoner_ros.server.settings import ServerSettings

SECRET = "PW"  # every generated password starts with it; nothing else generated holds an upper-case P or W

_lower = string.ascii_lowercase.replace("p", "").replace("w", "") + string.digits
_userinfo = _lower + "-._~!$&'()*+,;=%@:"  # RFC 3986 userinfo (with '@', which a password may hold)
_garbage = "".join(c for c in string.printable if c not in "[] \t\n\r\x0b\x0cPW")

schemes = st.sampled_from(["http", "https", "HTTP", "Https", "ftp", "file", "ws", ""])
separators = st.sampled_from(["://", "://", "://", "://", ":/", ":", "//", ":///"])
users = st.text(_lower, min_size=1, max_size=8)
passwords = st.text(_userinfo, max_size=12).map(lambda text: SECRET + text)
userinfos = st.one_of(
    st.just(""),
    users.map(lambda user: user + "@"),
    st.tuples(users, passwords).map(lambda up: f"{up[0]}:{up[1]}@"),
    passwords.map(lambda pw: f":{pw}@"),
)
hosts = st.one_of(
    st.sampled_from(["127.0.0.1", "localhost", "[::1]", "[2001:db8::8]", "[fe80::1%25eth0]", "gpu-host.lan"]),
    st.text(_lower + ".-", min_size=1, max_size=12),
    st.just(""),
)
ports = st.one_of(st.just(""), st.integers(0, 70000).map(lambda p: f":{p}"), st.just(":"))
paths = st.sampled_from(["", "/v1", "/api/v1", "/v1x", "/v10", "/x/v1", "/v1/chat", "/v1/v1", "/"])
slashes = st.integers(0, 3).map(lambda n: "/" * n)
tails = st.sampled_from(["", "", "?x=1", "#frag", "?next=@host", "/a@b"])


@st.composite
def structured_urls(draw: st.DrawFn) -> str:
    return (
        draw(schemes)
        + draw(separators)
        + draw(userinfos)
        + draw(hosts)
        + draw(ports)
        + draw(paths)
        + draw(slashes)
        + draw(tails)
    )


urls = st.one_of(structured_urls(), structured_urls(), st.text(_garbage, min_size=1, max_size=40))


def oracle_problem(url: str) -> str | None:
    """What the rule should say, from urllib.parse: "scheme" when the URL is not http(s)://, "credentials"
    when its authority holds a user or password, None when it is fine."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not url.startswith(parts.scheme + "://"):
        return "scheme"
    if parts.username is not None:
        return "credentials"
    return None


def oracle_root(url: str) -> str:
    """The server's root from urllib.parse: trailing slashes off the path, then one trailing /v1."""
    parts = urlsplit(url.rstrip("/"))
    if not parts.query and not parts.fragment and parts.path.endswith("/v1"):
        parts = parts._replace(path=parts.path[: -len("/v1")])
    return urlunsplit(parts)


def _raises(make: Callable[[], object], kind: type[Exception], named: str = "") -> str | None:
    try:
        make()
    except kind as err:
        assert not named or named in str(err), str(err)
        return str(err)
    return None


def _server_settings(url: str) -> str | None:
    message = _raises(lambda: ServerSettings(mode="external", server_url=url), ConfigError)
    return message if message and "\n  server_url:" in message else None


def _launch(url: str) -> str | None:
    return _raises(lambda: launch_config.plan({"server_url": url}), launch_config.LaunchArgumentError)


def _node(url: str) -> str | None:
    problems = [p for p in validate(default_config(server_url=url)) if p.startswith("server_url:")]
    return "\n".join(problems) or None


# Every place that takes a server URL: its verdict (the problem it names, None when it takes the URL).
PLACES: dict[str, Callable[[str], str | None]] = {
    "parameters.server_url": server_url_problem,
    "server settings": _server_settings,
    "client settings": lambda url: _raises(lambda: ClientSettings(base_url=url), ValueError, "base_url: "),
    "judge settings": lambda url: _raises(lambda: JudgeSettings(url=url), BagError, "--judge-url: "),
    "replay --server-url": lambda url: _raises(lambda: EvalOptions(server_url=url), BagError, "--server-url"),
    "replay -p server_url": lambda url: _raises(
        lambda: EvalOptions(params=(f"server_url:={json.dumps(url)}",)), BagError, "-p server_url"
    ),
    "replay params file": lambda url: replay_url_problem(url, "params: server_url") or None,
    "node parameters": _node,
    "launch arguments": _launch,
}


@given(urls)
@settings(max_examples=300, deadline=None)
@example("http://127.0.0.1:8000/v1")
@example("https://u:p@ss@host/v1")
@example("http://[::1]:8000/v1/")
@example("gpu-host:8000")
def test_the_rule_agrees_with_urllib(url: str) -> None:
    expected = oracle_problem(url)
    problem = server_url_problem(url)
    if expected is None:
        assert problem is None, (url, problem)
    elif expected == "scheme":
        assert problem is not None and problem.startswith("must start with http:// or https://"), (
            url,
            problem,
        )
    else:
        assert problem is not None and problem.startswith("must not contain credentials"), (url, problem)


@pytest.mark.parametrize("place", sorted(PLACES))
@given(url=urls)
@settings(max_examples=60, deadline=None)
def test_every_place_gives_the_same_verdict(place: str, url: str) -> None:
    verdict = PLACES[place](url)
    assert (verdict is None) == (oracle_problem(url) is None), (place, url, verdict)
    if verdict is not None:
        assert SECRET not in verdict, (place, url, verdict)


@given(structured_urls())
@settings(max_examples=300, deadline=None)
def test_nothing_shown_holds_the_password(url: str) -> None:
    shown = shown_url(url)
    assert SECRET not in shown, (url, shown)
    assert SECRET not in (server_url_problem(url) or "")
    assert SECRET not in "".join(secret_problems({"server_url": url}))
    if "://" in url and oracle_problem(url) == "credentials":
        assert "<redacted>@" in shown, (url, shown)


# Accepted URLs with a host and no query (`http://` alone has no root to speak of).
fine_urls = st.builds(
    lambda *parts: "".join(parts),
    st.sampled_from(["http://", "https://"]),
    hosts.filter(bool),
    ports,
    paths,
    slashes,
    st.sampled_from(["", "/a@b"]),
)


@given(fine_urls)
@settings(max_examples=100, deadline=None)
def test_the_root_and_normal_form_agree_with_urllib(url: str) -> None:
    assert oracle_problem(url) is None
    assert normalise_server_url(url) == url.rstrip("/")
    assert server_root(url) == oracle_root(url)
    assert ClientSettings(base_url=url).server_url == server_root(url)
    assert ServerSettings(mode="external", server_url=url).url == server_root(url)


def test_the_default_is_vllms_local_api() -> None:
    assert server_url_problem(DEFAULT_SERVER_URL) is None
    assert server_root(DEFAULT_SERVER_URL) == "http://127.0.0.1:8000"
    assert ClientSettings().base_url == EvalOptions().server_url == DEFAULT_SERVER_URL


@given(st.integers(1, 65535))
@settings(max_examples=100, deadline=None)
def test_a_local_servers_url_is_its_port_on_this_host(port: int) -> None:
    """The launch file's default server_url (from its port argument) is this rule's, and passes it."""
    url = local_server_url(port)
    parts = urlsplit(url)
    assert (parts.scheme, parts.hostname, parts.port, parts.path) == ("http", "127.0.0.1", port, "/v1")
    assert server_url_problem(url) is None and server_root(url) == f"http://127.0.0.1:{port}"
    plan = launch_config.plan({"start_server": "false", "port": str(port)})
    assert plan.node.overrides["server_url"] == url
