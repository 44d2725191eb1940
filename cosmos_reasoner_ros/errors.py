"""The errors a request can end in: each type says what went wrong and is one ReasonerResult.error_kind (the
kinds are documented once, as the ERROR_* constants of msg/ReasonerResult.msg).

Only these become results. Invalid settings (constructor arguments, parameters) raise ValueError, which the
node reports as parameters.ConfigError before it starts; the tools have their own errors (bag.errors.BagError,
server.errors.SupervisorError) that they turn into exit codes.
"""

from __future__ import annotations


class ReasonerError(Exception):
    """Base of every error the pipeline raises on purpose; `kind` is the ReasonerResult.error_kind."""

    kind = "internal"


class FrameError(ReasonerError):
    """A camera message could not be turned into pixels (bad size, step, encoding, undecodable data)."""

    kind = "invalid_frame"


class FrameTooLarge(FrameError):
    """A frame declares more pixels than `max_pixels`: a decompression bomb, or a camera larger than
    configured. Raised from the header alone, before any decoding; `width`, `height` as declared."""

    def __init__(self, message: str, width: int = 0, height: int = 0, max_pixels: int = 0) -> None:
        super().__init__(message)
        self.width = width
        self.height = height
        self.max_pixels = max_pixels


class NonColourImage(FrameError):
    """A non-colour encoding (depth, mono16, ...) arrived on a colour camera topic; `encoding` names it."""

    def __init__(self, message: str, encoding: str = "") -> None:
        super().__init__(message)
        self.encoding = encoding


class ImplausibleStamp(FrameError):
    """A header stamp further ahead of the receive time than `max_stamp_ahead_s` (clocks not synchronised, a
    broken driver); `ahead_s` is by how much."""

    def __init__(self, message: str, ahead_s: float = 0.0) -> None:
        super().__init__(message)
        self.ahead_s = ahead_s


class NoFramesError(ReasonerError):
    """Nothing was buffered in the requested time window."""

    kind = "no_frames"


class ClipError(ReasonerError):
    """A clip or image could not be encoded or written (disk full, unwritable directory, codec failure)."""

    kind = "clip_not_written"


class MediaPathError(ClipError):
    """A path would leave the media directory (`..`, absolute path elsewhere, symlink)."""


class UnsafeMediaDirectory(MediaPathError):
    """The media directory is not private to the node: reached through a symbolic link, owned by another
    user, writable by others, or under a directory others control. The message names `media_dir` and a fix."""


class TaskError(ReasonerError):
    """Unknown task, missing placeholder value, or an invalid task definition; raised before any request."""

    kind = "invalid_request"


class ServerUnavailable(ReasonerError):
    """The server could not be reached (connection refused, DNS, not healthy) after the allowed retries."""

    kind = "server_unavailable"


class RequestRejected(ReasonerError):
    """The server refused the request: HTTP 4xx, or an error event with a 4xx code inside a streamed answer;
    the message is the server's own. Never retried: the same request would be refused again."""

    kind = "rejected"

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class GrammarError(ReasonerError):
    """The server could not use the request's structured-output grammar (the task's json_schema): it refused
    it (4xx with a message about the grammar) or failed on it before the first token (HTTP 500, an error event
    in the stream, or, vLLM 0.26-0.31, a stream that ends without a token or a finish reason, which is how
    those releases end a request whose grammar their engine could not compile). Never retried: the same
    grammar fails again. The message names the task and holds the server's."""

    kind = "grammar"


class ServerError(ReasonerError):
    """The server failed on the request: HTTP 500 or another 5xx that does not mean "unavailable" (502, 503
    and 504 are ServerUnavailable) after the allowed retries, or an error event without a 4xx code inside a
    streamed answer; the message is the server's own."""

    kind = "server_error"

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class BadResponse(ReasonerError):
    """The server answered, but not with a chat completion: a body that is not JSON, a completion without
    choices, a stream that ended without a finish reason. Not retried."""

    kind = "bad_response"


class RequestTimeout(ReasonerError):
    """The server did not answer within the read timeout."""

    kind = "timeout"


class ServerTooSlow(ReasonerError):
    """The server kept the request open without answering at the pace any working server keeps: no first
    token (reasoning or content) within the first-token bound, fewer tokens than the progress floor over its
    window, or no end within the time max_tokens take at the floor. Bytes that carry no token (headers sent a
    byte at a time, SSE keep-alive comments) are not progress. The request was cut and its connection
    closed; the message says which bound and by how much. Not retried."""

    kind = "too_slow"


class AnswerTooLarge(ReasonerError):
    """The answer grew past its size bound, derived from the request's max_tokens (its text, reasoning
    included, at a generous number of characters per token; the bytes on the wire likewise): the stream was
    cut at the bound and its connection closed, an unstreamed body read no further. What had arrived up to the
    bound is kept as the partial answer; nothing beyond it is held. Not retried."""

    kind = "answer_too_large"


class DeadlineExceeded(RequestTimeout):
    """The request's deadline (a goal's deadline_s, the node's trigger_deadline_s) passed before it ended: it
    was cancelled (a streamed answer at the server too), with what it had done so far."""


class RequestCancelled(ReasonerError):
    """The request was cancelled by the caller while in flight."""

    kind = "cancelled"


class ParseError(ReasonerError):
    """The answer arrived but is not in the task's format. `raw` keeps the full text."""

    kind = "unparseable"

    def __init__(self, message: str, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


class TruncatedAnswer(ParseError):
    """The answer was cut off by max_tokens (finish_reason "length"); `raw` keeps the partial text."""

    kind = "truncated"


class IncompleteAnswer(ParseError):
    """A structured answer that is not whole, whatever the finish reason: a JSON value opened and never
    closed, a <think> block never closed, text after the value, or several values where one is due."""

    kind = "incomplete"


class SchemaViolation(ParseError):
    """One whole JSON value that the schema sent with the request refuses: the server did not enforce it."""

    kind = "schema_invalid"


# The error kinds of an answer that arrived but is not usable: the server answered (a parse rate counts them).
ANSWER_ERROR_KINDS = (ParseError.kind, TruncatedAnswer.kind, IncompleteAnswer.kind, SchemaViolation.kind)


class BusyError(ReasonerError):
    """Too many requests in flight for this camera group; the trigger was rejected."""

    kind = "busy"


class StaleResult(ReasonerError):
    """The answer arrived, but it was older than its max_result_age_s when published (from the clip's end): it
    is published with this kind, its answer and parts kept, and forwarded nowhere else."""

    kind = "stale"


QUOTE_CHARS = 64  # characters of user input an error message quotes at most


def quoted(text: str, limit: int = QUOTE_CHARS) -> str:
    """User input as an error message quotes it: its repr, at most `limit` characters of it, and its full
    length when cut. A hostile name of a megabyte is never echoed whole (into a result, a log, a reply)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"
