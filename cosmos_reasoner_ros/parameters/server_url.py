"""The one rule for a server URL: its default, its check, its normal form and how a log may show it.

Every place that takes a server URL (the node's server_url, the server's --server-url, the client's
base_url, the bag tools' --server-url and --judge-url) asks this module, so that they refuse the same URLs
with the same words. It imports nothing of the package: it sits on the bottom floor beside errors.
"""

from __future__ import annotations

import re

__all__ = [
    "DEFAULT_SERVER_URL",
    "REDACTED",
    "local_server_url",
    "normalise_server_url",
    "server_root",
    "server_url_problem",
    "shown_url",
    "url_has_credentials",
]

REDACTED = "<redacted>"
_SCHEMES = ("http://", "https://")  # never file:// or others: urlopen would open local files
_API_SUFFIX = "/v1"
_WELL_FORMED = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]")  # a scheme, then an authority
_SHOWN_CHARS = 200  # characters of a URL an error message quotes at most


def local_server_url(port: int) -> str:
    """The base URL of the OpenAI-compatible API of a vLLM server on this host listening on `port`."""
    return f"http://127.0.0.1:{port}{_API_SUFFIX}"


DEFAULT_SERVER_URL = local_server_url(8000)  # vLLM's default port


def url_has_credentials(url: str) -> bool:
    """Whether a URL carries a user or password (`http://user:password@host/`). Such URLs are refused
    wherever one is configured: they would show their secret in logs, diagnostics and parameter dumps, and
    the HTTP client would send them as Basic authentication instead of the API key as a bearer token."""
    netloc = url.partition("://")[2].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return "@" in netloc


def shown_url(url: str) -> str:
    """A URL as an error message or a log may show it: its repr, the credentials replaced (up to the last '@'
    of the authority, as a password may hold '@'), the rest a bounded prefix. A malformed URL loses all up to
    its last '@' before any query (`http:/user:password@host`): a typo must not put a secret in a log."""
    scheme, sep, rest = url.partition("://")
    if not _WELL_FORMED.match(url):
        end = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
        at = url.rfind("@", 0, end)
        text = url if at < 0 else REDACTED + url[at:]
    elif url_has_credentials(url):
        host_part, slash, path = rest.partition("/")
        text = scheme + sep + REDACTED + "@" + host_part.rsplit("@", 1)[1] + slash + path
    else:
        text = url
    if len(text) <= _SHOWN_CHARS:
        return repr(text)
    return f"{text[:_SHOWN_CHARS]!r}... ({len(text)} characters)"


def server_url_problem(url: str) -> str | None:
    """What is wrong with a server URL, never quoting its secret; None when nothing is. The caller names the
    setting: f"{name}: {problem}"."""
    if not url.startswith(_SCHEMES):
        return f"must start with http:// or https://, got {shown_url(url)}"
    if url_has_credentials(url):
        return (
            "must not contain credentials (user:password@): the API key comes from the environment "
            f"variable named by api_key_env and is sent as a bearer token; got {shown_url(url)}"
        )
    return None


def normalise_server_url(url: str) -> str:
    """The URL as requests are built on it: without trailing slashes (paths such as /models are appended)."""
    return url.rstrip("/")


def server_root(url: str) -> str:
    """The server's root (where vLLM's /health and /version live): the normal form less its trailing /v1."""
    url = normalise_server_url(url)
    return url[: -len(_API_SUFFIX)] if url.endswith(_API_SUFFIX) else url
