"""The task catalog (config/tasks.yaml): prompt templates, media, reasoning, answer kinds, sampling profiles.

Everything is validated when the file loads, and a render with a missing value is a TaskError, so a bad task
never reaches the server.
"""

from __future__ import annotations

import copy
import dataclasses
import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.errors import TaskError
from cosmos_reasoner_ros.package_files import config_file
from cosmos_reasoner_ros.reasoner.kinds import ANSWER_KINDS
from cosmos_reasoner_ros.schemas.structured_output import merge_catalogs, read_catalog_file, schema_problems

MEDIA_KINDS = ("video", "image")
REASONING_FORMATS = ("think", "answer_tag")
_PROFILE_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty", "presence_penalty", "max_tokens")
_TASK_FIELDS = {
    "template",
    "media",
    "reasoning",
    "reasoning_format",
    "answer_kind",
    "profile",
    "max_tokens",
    "json_schema",
    "defaults",
    "description",
    "priority",
    "plain_profile",
}
_REQUIRED_TASK_FIELDS = ("template", "media", "reasoning", "answer_kind", "profile")


@dataclass(frozen=True)
class SamplingProfile:
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    presence_penalty: float
    max_tokens: int


@dataclass(frozen=True)
class TaskSpec:
    """One validated entry of the catalog."""

    name: str
    template: str
    placeholders: tuple[str, ...]  # in template order, without repeats
    media: str
    reasoning: bool
    reasoning_format: str
    answer_kind: str
    profile: str
    sampling: SamplingProfile  # the profile with this task's max_tokens applied
    json_schema: dict[str, Any] | None = None
    defaults: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    priority: int = 0  # vLLM's request priority: lower is served first (with scheduling_policy: priority)
    # The sampling of a request that turns reasoning off (a fast answer): plain_profile with this task's
    # max_tokens; the task's own sampling when the task does not reason.
    plain_sampling: SamplingProfile | None = None


@dataclass(frozen=True)
class RenderedTask:
    name: str
    prompt: str  # the filled template, reasoning suffix NOT included
    media: str  # "video" | "image"
    reasoning: bool
    reasoning_format: str  # "think" | "answer_tag"
    answer_kind: str  # a name of kinds.KINDS
    sampling: SamplingProfile
    json_schema: dict[str, Any] | None
    priority: int = 0  # vLLM's request priority (lower first); sent with every request


def shipped_tasks_path() -> Path:
    """The catalog that comes with the package (found as package_files finds every shipped file)."""
    try:
        return config_file("tasks.yaml")
    except FileNotFoundError as exc:
        raise TaskError(str(exc)) from None


def template_placeholders(template: str, where: str = "template") -> tuple[str, ...]:
    """Named placeholders of a str.format template; anything else (positional `{}`, attribute or index access,
    conversions, format specs, unbalanced braces) is a TaskError."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise TaskError(f"{where}: {err} (write literal braces as {{{{ and }}}})") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier():
            raise TaskError(
                f"{where}: placeholder {{{name}}} is not a plain name (literal braces are {{{{ }}}})"
            )
        if spec or conversion:
            raise TaskError(f"{where}: placeholder {{{name}}} may not have a conversion or format spec")
        if name not in names:
            names.append(name)
    return tuple(names)


class TaskCatalog:
    """Named tasks and sampling profiles; render() turns a task and its values into a RenderedTask."""

    def __init__(
        self,
        profiles: Mapping[str, SamplingProfile],
        tasks: Mapping[str, TaskSpec],
        sources: tuple[Path, ...] = (),
    ) -> None:
        self.profiles = dict(profiles)
        self.tasks = dict(tasks)
        self.sources = sources

    @classmethod
    def load(cls, path: Path | str | None = None, *, extend: bool = True) -> TaskCatalog:
        """The shipped catalog, or `path` merged over it (field by field); extend=False loads `path` alone."""
        shipped = shipped_tasks_path()
        if path is None:
            return cls.from_dict(_read_yaml(shipped), (shipped,))
        user = Path(path)
        if not extend:
            return cls.from_dict(_read_yaml(user), (user,))
        try:
            merged = merge_catalogs(_read_yaml(shipped), _read_yaml(user))
        except ValueError as err:
            raise TaskError(f"{user}: {err}") from None
        return cls.from_dict(merged, (shipped, user))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], sources: tuple[Path, ...] = ()) -> TaskCatalog:
        where = ", ".join(str(s) for s in sources) or "task catalog"
        unknown = set(data) - {"profiles", "tasks"}
        if unknown:
            raise TaskError(f"{where}: unknown top-level keys {sorted(unknown)} (expected profiles, tasks)")
        raw_profiles = _mapping(data.get("profiles") or {}, f"{where}: profiles")
        raw_tasks = _mapping(data.get("tasks") or {}, f"{where}: tasks")
        profiles = {
            str(n): _profile(str(n), _mapping(p, f"{where}: profile {n}"), where)
            for n, p in raw_profiles.items()
        }
        tasks = {
            str(n): _task(str(n), _mapping(t, f"{where}: task {n}"), profiles, where)
            for n, t in raw_tasks.items()
        }
        if not tasks:
            raise TaskError(f"{where}: no tasks defined")
        return cls(profiles, tasks, sources)

    def names(self) -> list[str]:
        return list(self.tasks)

    def __contains__(self, name: object) -> bool:
        return name in self.tasks

    def __iter__(self) -> Iterator[str]:
        return iter(self.tasks)

    def spec(self, task: str) -> TaskSpec:
        try:
            return self.tasks[task]
        except KeyError:
            raise TaskError(f"unknown task {task!r}; known tasks: {', '.join(self.tasks)}") from None

    def render_without_reasoning(self, task: str, /, **values: str) -> RenderedTask:
        """As render(), for a fast answer: no reasoning suffix, and the task's non-reasoning sampling profile
        (plain_profile). A task that does not reason renders as with render()."""
        rendered = self.render(task, **values)
        plain = self.spec(task).plain_sampling or rendered.sampling
        return dataclasses.replace(rendered, reasoning=False, sampling=plain)

    def render(self, task: str, /, **values: str) -> RenderedTask:
        """Fill the task's template. Values the template does not use are ignored; a placeholder with neither
        a non-blank value nor a default is a TaskError."""
        spec = self.spec(task)
        filled: dict[str, str] = {}
        missing: list[str] = []
        for name in spec.placeholders:
            value = values.get(name)
            if value is not None and not isinstance(value, str):
                raise TaskError(
                    f"task {task!r}: value for {name!r} must be a string, got {type(value).__name__}"
                )
            if value is not None and value.strip():
                filled[name] = value
            elif name in spec.defaults:
                filled[name] = spec.defaults[name]
            else:
                missing.append(name)
        if missing:
            raise TaskError(f"task {task!r} needs a value for {', '.join(repr(m) for m in missing)}")
        return RenderedTask(
            name=spec.name,
            prompt=spec.template.format_map(filled).strip(),
            media=spec.media,
            reasoning=spec.reasoning,
            reasoning_format=spec.reasoning_format,
            answer_kind=spec.answer_kind,
            sampling=spec.sampling,
            json_schema=copy.deepcopy(spec.json_schema),
            priority=spec.priority,
        )


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        return read_catalog_file(path)
    except ValueError as err:
        raise TaskError(str(err)) from None


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TaskError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskError(f"{where} must be a number, got {value!r}")
    return float(value)


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TaskError(f"{where} must be an integer, got {value!r}")
    return value


def _profile(name: str, raw: Mapping[str, Any], where: str) -> SamplingProfile:
    at = f"{where}: profile {name!r}"
    unknown = set(raw) - set(_PROFILE_FIELDS)
    missing = [f for f in _PROFILE_FIELDS if f not in raw]
    if unknown or missing:
        raise TaskError(f"{at}: unknown fields {sorted(unknown)}, missing fields {missing}")
    profile = SamplingProfile(
        temperature=_number(raw["temperature"], f"{at}: temperature"),
        top_p=_number(raw["top_p"], f"{at}: top_p"),
        top_k=_integer(raw["top_k"], f"{at}: top_k"),
        repetition_penalty=_number(raw["repetition_penalty"], f"{at}: repetition_penalty"),
        presence_penalty=_number(raw["presence_penalty"], f"{at}: presence_penalty"),
        max_tokens=_integer(raw["max_tokens"], f"{at}: max_tokens"),
    )
    if profile.temperature < 0 or not 0 < profile.top_p <= 1 or profile.max_tokens < 1:
        raise TaskError(f"{at}: needs temperature >= 0, 0 < top_p <= 1 and max_tokens >= 1")
    if profile.top_k == 0 or profile.top_k < -1 or profile.repetition_penalty <= 0:
        raise TaskError(f"{at}: needs top_k -1 (off) or >= 1, and repetition_penalty > 0")
    if not -2 <= profile.presence_penalty <= 2:
        raise TaskError(f"{at}: presence_penalty must be within [-2, 2]")
    return profile


def _choice(raw: Mapping[str, Any], key: str, allowed: tuple[str, ...], at: str) -> str:
    value = raw[key]
    if value not in allowed:
        raise TaskError(f"{at}: {key} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def _task(name: str, raw: Mapping[str, Any], profiles: Mapping[str, SamplingProfile], where: str) -> TaskSpec:
    at = f"{where}: task {name!r}"
    if not name.isidentifier():
        raise TaskError(f"{at}: task names are plain identifiers (letters, digits, _)")
    unknown = set(raw) - _TASK_FIELDS
    if unknown:
        raise TaskError(f"{at}: unknown fields {sorted(unknown)}; allowed: {sorted(_TASK_FIELDS)}")
    missing = [f for f in _REQUIRED_TASK_FIELDS if f not in raw]
    if missing:
        raise TaskError(f"{at}: missing fields {missing}")
    template = raw["template"]
    if not isinstance(template, str) or not template.strip():
        raise TaskError(f"{at}: template must be a non-empty string")
    placeholders = template_placeholders(template, f"{at}: template")
    if not isinstance(raw["reasoning"], bool):
        raise TaskError(f"{at}: reasoning must be true or false")
    profile_name = raw["profile"]
    if profile_name not in profiles:
        raise TaskError(f"{at}: unknown profile {profile_name!r}; known: {', '.join(profiles)}")
    # Reasoning turned off: the plain profile named, else the catalog's `default` (the cookbook's numbers
    # without reasoning) for a task that reasons; a task that does not reason keeps its own.
    plain_name = raw.get("plain_profile")
    if plain_name is None:
        plain_name = "default" if raw["reasoning"] and "default" in profiles else profile_name
    if plain_name not in profiles:
        raise TaskError(f"{at}: unknown plain_profile {plain_name!r}; known: {', '.join(profiles)}")
    sampling, plain_sampling = profiles[profile_name], profiles[plain_name]
    if raw.get("max_tokens") is not None:
        max_tokens = _integer(raw["max_tokens"], f"{at}: max_tokens")
        if max_tokens < 1:
            raise TaskError(f"{at}: max_tokens must be >= 1")
        sampling = dataclasses.replace(sampling, max_tokens=max_tokens)
        plain_sampling = dataclasses.replace(plain_sampling, max_tokens=max_tokens)
    schema = raw.get("json_schema")
    if schema is not None and not isinstance(schema, dict):
        raise TaskError(f"{at}: json_schema must be a mapping (a JSON schema)")
    problems = schema_problems(schema, f"{at}: json_schema") if schema is not None else []
    if problems:
        raise TaskError("; ".join(problems))
    defaults = _mapping(raw.get("defaults") or {}, f"{at}: defaults")
    for key, value in defaults.items():
        if key not in placeholders:
            raise TaskError(f"{at}: default for {key!r}, which the template does not use")
        if not isinstance(value, str):
            raise TaskError(f"{at}: default for {key!r} must be a string")
    description = raw.get("description", "")
    priority = _integer(raw.get("priority", 0), f"{at}: priority")
    if not -(2**31) <= priority < 2**31:
        raise TaskError(f"{at}: priority must fit a 32-bit integer, got {priority}")
    return TaskSpec(
        name=name,
        template=template,
        placeholders=placeholders,
        media=_choice(raw, "media", MEDIA_KINDS, at),
        reasoning=raw["reasoning"],
        reasoning_format=_choice(
            {"reasoning_format": raw.get("reasoning_format", "think")},
            "reasoning_format",
            REASONING_FORMATS,
            at,
        ),
        answer_kind=_choice(raw, "answer_kind", ANSWER_KINDS, at),
        profile=str(profile_name),
        sampling=sampling,
        json_schema=copy.deepcopy(schema),
        defaults={str(k): str(v) for k, v in defaults.items()},
        description=str(description),
        priority=priority,
        plain_sampling=plain_sampling,
    )
