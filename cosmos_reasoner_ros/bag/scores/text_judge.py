"""The optional judge of free-text answers: a second OpenAI-compatible endpoint (the Reasoner itself, or any
model) asked whether an answer means the same as the acceptable answers. Every prompt and reply is kept, so
that a reader can check the judge; a reply that is neither yes nor no, or a failed call, is counted as
unjudged, never as a verdict."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.parameters.server_url import server_url_problem
from cosmos_reasoner_ros.reasoner import split_reasoning

__all__ = ["JudgeAnswer", "JudgeSettings", "TextJudge", "judge_prompt", "read_verdict"]


@dataclass(frozen=True)
class JudgeSettings:
    url: str  # the endpoint's base URL, e.g. http://127.0.0.1:8000/v1
    model: str = ""  # "": the first model the endpoint lists
    api_key_env: str = "COSMOS_REASONER_JUDGE_API_KEY"  # the variable holding its API key (may be unset)
    timeout_s: float = 60.0
    max_tokens: int = 256
    workers: int = 4  # questions in flight at once

    def __post_init__(self) -> None:
        if problem := server_url_problem(self.url):
            raise BagError(f"--judge-url: {problem}")
        if not self.timeout_s > 0 or self.max_tokens < 1 or self.workers < 1:
            raise BagError("the judge's timeout, max_tokens and workers must be positive")


@dataclass(frozen=True)
class JudgeAnswer:
    same: bool | None  # None: unjudged (an unclear reply, or the call failed)
    prompt: str
    reply: str = ""
    error: str = ""
    model: str = ""


def judge_prompt(task: str, instruction: str, candidate: str, references: Sequence[str]) -> str:
    asked = f'the task "{task}"' + (f' with the instruction "{instruction}"' if instruction else "")
    listed = "\n".join(f"- {r}" for r in references)
    return (
        f"A robot's vision-language model answered {asked} about a camera clip. A person wrote the "
        "acceptable "
        f"answers.\n\nAcceptable answers:\n{listed}\n\nModel answer:\n{candidate}\n\n"
        "Does the model answer mean the same as one of the acceptable answers, for a robot that acts on it? "
        "Reply with one word: yes or no."
    )


_WORD = re.compile(r"[a-z]+")


def read_verdict(reply: str) -> bool | None:
    """yes / no from the judge's reply (after any reasoning); None when the reply says neither first."""
    _, answer = split_reasoning(reply)
    for word in _WORD.findall(answer.casefold()):
        if word in ("yes", "same"):
            return True
        if word in ("no", "not", "different"):
            return False
        return None
    return None


class TextJudge:
    """Asks the endpoint, one question per distinct (answer, acceptable answers); thread-safe."""

    def __init__(self, settings: JudgeSettings) -> None:
        from openai import OpenAI

        self.settings = settings
        key = os.environ.get(settings.api_key_env, "").strip() if settings.api_key_env else ""
        self._client = OpenAI(
            base_url=settings.url, api_key=key or "EMPTY", timeout=settings.timeout_s, max_retries=1
        )
        self._model = settings.model
        self._lock = threading.Lock()
        # One question per distinct (task, instruction, answer, acceptable answers), also while in flight.
        self._asked: dict[tuple[str, str, str, tuple[str, ...]], Future[JudgeAnswer]] = {}

    def model(self) -> str:
        with self._lock:
            if not self._model:
                models = self._client.models.list()
                first = next(iter(models.data), None)
                if first is None:
                    raise RuntimeError("the judge endpoint lists no model")
                self._model = first.id
            return self._model

    def ask(self, task: str, instruction: str, candidate: str, references: Sequence[str]) -> JudgeAnswer:
        key = (task, instruction, candidate, tuple(references))
        mine: Future[JudgeAnswer] = Future()
        with self._lock:
            asked = self._asked.get(key)
            if asked is None:
                self._asked[key] = mine
        if asked is not None:
            return asked.result()
        prompt = judge_prompt(task, instruction, candidate, references)
        try:
            model = self.model()
            completion: Any = self._client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": prompt}],
                temperature=0.0,
                max_tokens=self.settings.max_tokens,
            )
            message = completion.choices[0].message if completion.choices else None
            content = (getattr(message, "content", None) or "") if message is not None else ""
            reasoning = getattr(message, "reasoning", None) or getattr(message, "reasoning_content", None)
            reply = content or (reasoning if isinstance(reasoning, str) else "")
            answer = JudgeAnswer(read_verdict(reply), prompt, reply, model=model)
        except Exception as exc:  # the judge is an aid: its failure leaves the answer unjudged, never a crash
            answer = JudgeAnswer(None, prompt, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        mine.set_result(answer)
        return answer
