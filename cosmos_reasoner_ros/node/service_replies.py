"""Every request to one of the node's services gets a reply. rclpy sends nothing when a service callback
raises, and the exception then escapes the executor's spin (a managed node asked for a transition that does
not exist from its state exited 1 that way): a guarded callback answers such a request as a failure, with
`success: false` and the error where the response has those fields, and reports the error."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["AnswerCount", "always_answer", "failure_place", "failure_summary"]

_GUARDED = "_always_answers"


class AnswerCount:
    """How many requests the node's services and its action have answered, from any thread: the process's
    last drain spins until it stops growing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def add(self) -> None:
        with self._lock:
            self._value += 1

    @property
    def value(self) -> int:
        with self._lock:
            return self._value


def failure_place(exc: BaseException) -> str:
    """The kind of error and where it was raised (file:line): the same for every repeat of one failure."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}{where}"


def failure_summary(exc: BaseException) -> str:
    """One line for the log: the error and where it was raised, never the whole traceback."""
    kind, _, where = failure_place(exc).partition(" at ")
    return f"{kind}: {exc}" + (f" at {where}" if where else "")


def always_answer(
    service: Any, report: Callable[[str, str], None], answered: AnswerCount | None = None
) -> None:
    """Wrap `service`'s callback (once) so that an exception becomes a failed response (`service`: an rclpy
    Service, typed Any because Kilted's stubs make it generic and Jazzy's do not);
    `report(key, message)` is told (a throttled log: a request sent again and again must not flood it);
    `answered` counts every answer."""
    callback = service.callback
    if getattr(callback, _GUARDED, False):
        return
    name = service.service_name  # expanded: /node/trigger, not ~/trigger

    def guarded(request: Any, response: Any) -> Any:
        try:
            return callback(request, response)
        except Exception as exc:
            summary = failure_summary(exc)
            report(
                f"service:{name}:{type(exc).__name__}",
                f"{name}: the request failed ({summary}); answered as a failure",
            )
            srv_type: Any = service.srv_type
            failed = srv_type.Response()
            if hasattr(failed, "success"):
                failed.success = False
            if hasattr(failed, "message"):
                failed.message = f"rejected: internal error ({type(exc).__name__}: {str(exc)[:200]})"
            return failed
        finally:
            if answered is not None:
                answered.add()

    setattr(guarded, _GUARDED, True)
    service.callback = guarded
