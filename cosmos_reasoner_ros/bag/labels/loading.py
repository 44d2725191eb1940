"""Reading a labels file: YAML checked key by key, each answer parsed by the project's own parser as the
task's answer kind. A labels file is user input that may be any file: only a regular file of bounded size is
read, YAML anchors and aliases are refused (no expansion bombs), and errors name a label's position and line,
never the file's content (a secret file given by mistake is not echoed to a CI log)."""

from __future__ import annotations

import json
import math
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels.schema import LABEL_VERSION, Label, LabelSet, LabelTolerances
from cosmos_reasoner_ros.bag.safe_paths import printable
from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.reasoner import ANSWER_KINDS, KINDS, ParsedAnswer, TaskCatalog, parse_answer

__all__ = ["ANSWER_FORMS", "MAX_FILE_BYTES", "labels_from_text", "load_labels"]

MAX_FILE_BYTES = 16 * 1024 * 1024
_MAX_LABELS = 200_000
_MAX_ANSWERS = 64
_MAX_ANSWER_CHARS = 65_536

_TOP_KEYS = ("version", "bag", "tolerances", "labels")
_LABEL_KEYS = (
    "task",
    "kind",
    "at",
    "between",
    "instruction",
    "step",
    "answer",
    "answers",
    "tolerances",
    "note",
)
_TOLERANCE_KEYS = ("time_s", "iou_min", "tiou_min", "match_min")
_AT_MOST_ONE = ("iou_min", "tiou_min", "match_min")

ANSWER_FORMS = {name: kind.label_form for name, kind in KINDS.items()}  # how each kind's answer is written


class _Loader(yaml.SafeLoader):
    """SafeLoader without anchors and aliases: an alias could make a small file expand without bound."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        _refuse_anchors(self.peek_event())  # type: ignore[no-untyped-call]
        return super().compose_node(parent, index)


class _Refused(Exception):
    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.mark = mark


def _refuse_anchors(event: Any) -> None:
    if isinstance(event, yaml.AliasEvent):
        raise _Refused("YAML aliases (*name) are not allowed in a labels file", event.start_mark)
    if getattr(event, "anchor", None):
        raise _Refused("YAML anchors (&name) are not allowed in a labels file", event.start_mark)


# libyaml's loader where PyYAML has it (ten times faster on a file of thousands of labels); the same checks.
_LIBYAML: Any = getattr(yaml, "CSafeLoader", None)


def _loader(text: str, libyaml: bool) -> Any:
    """A composing loader for `text`; anchors and aliases refused before any node is composed."""
    if not (libyaml and _LIBYAML is not None):
        return _Loader(text)
    for event in yaml.parse(text, Loader=_LIBYAML):  # libyaml composes in C: look at the events first
        _refuse_anchors(event)
    return _LIBYAML(text)


def _line(node: Any) -> int:
    mark = getattr(node, "start_mark", None)
    return int(mark.line) + 1 if mark is not None else 0


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`")


def _problem(text: str | None) -> str:
    """A YAML error's description with every quoted part (where PyYAML puts the file's characters) removed."""
    return " ".join(_QUOTED.sub("", text or "").split()) or "not valid YAML"


def _read_text(path: Path) -> str:
    shown = printable(str(path))
    try:
        info = path.stat()
    except OSError as exc:
        raise BagError(f"cannot read the labels file {shown}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise BagError(f"the labels file {shown} is not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise BagError(f"the labels file {shown} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise BagError(f"cannot read the labels file {shown}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise BagError(f"the labels file {shown} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BagError(f"the labels file {shown} is not UTF-8 text (byte {exc.start})") from None


def load_labels(path: Path, catalog: TaskCatalog | None = None, *, libyaml: bool = True) -> LabelSet:
    """The labels of `path`; BagError naming the position and line of what is wrong."""
    return labels_from_text(_read_text(path), printable(str(path)), catalog, libyaml=libyaml)


class _Reader:
    """Walks the composed YAML nodes, so that every message can say the line of what it is about."""

    def __init__(self, loader: Any, source: str) -> None:
        self.loader = loader
        self.source = source

    def fail(self, node: Any, message: str) -> BagError:
        line = _line(node)
        return BagError(f"labels file {self.source}{f', line {line}' if line else ''}: {message}")

    def value(self, node: Any) -> Any:
        return self.loader.construct_object(node, deep=True)

    def mapping(self, node: Any, known: tuple[str, ...], what: str) -> dict[str, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping")
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str) or key not in known:
                raise self.fail(key_node, f"{what}: unknown key; known: {', '.join(known)}")
            if key in out:
                raise self.fail(key_node, f"{what}: key {key} given twice")
            out[key] = value_node
        return out

    def number(self, node: Any, what: str, at_most: float | None = None) -> float:
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(node, f"{what} must be a finite number")
        if value < 0 or (at_most is not None and value > at_most):
            bound = f"0-{at_most:g}" if at_most is not None else ">= 0"
            raise self.fail(node, f"{what} must be {bound}")
        return float(value)

    def text(self, node: Any, what: str) -> str:
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if value is None:
            return ""
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise self.fail(node, f"{what} must be text")
        return str(value)

    def tolerances(self, node: Any, base: LabelTolerances, what: str) -> LabelTolerances:
        from dataclasses import replace

        keys = self.mapping(node, _TOLERANCE_KEYS, what)
        values = {
            key: self.number(value, f"{what}.{key}", 1.0 if key in _AT_MOST_ONE else None)
            for key, value in keys.items()
        }
        return replace(base, **values)


def _answer_text(reader: _Reader, node: Any, what: str) -> str:
    """An answer as text: a string as written, or YAML structure (a list of point mappings) as JSON."""
    value = reader.value(node)
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool) or value is None:
        raise reader.fail(node, f"{what} must be the answer as the model would write it")
    elif isinstance(value, (int, float)):
        text = str(value)
    else:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):
            raise reader.fail(node, f"{what} must be the answer as the model would write it") from None
    if len(text) > _MAX_ANSWER_CHARS:
        raise reader.fail(node, f"{what} is longer than {_MAX_ANSWER_CHARS} characters")
    if not text.strip():
        raise reader.fail(node, f"{what} is empty")
    return text


def _parsed(reader: _Reader, node: Any, kind: str, what: str) -> ParsedAnswer:
    text = _answer_text(reader, node, what)
    try:
        return parse_answer(text, kind)
    except ParseError:
        raise reader.fail(
            node,
            f"{what} is not a {kind} answer the parser reads; write it as the model would: "
            f"{ANSWER_FORMS[kind]}",
        ) from None


def _times(reader: _Reader, node: Any, what: str) -> tuple[float, ...]:
    if isinstance(node, yaml.SequenceNode):
        if not node.value:
            raise reader.fail(node, f"{what} must name at least one bag time")
        return tuple(reader.number(item, what) for item in node.value)
    return (reader.number(node, what),)


def _label(
    reader: _Reader,
    node: Any,
    index: int,
    defaults: LabelTolerances,
    kind_of: Callable[[str], str | None],
) -> Label:
    where = f"labels[{index}]"
    keys = reader.mapping(node, _LABEL_KEYS, where)
    if "task" not in keys:
        raise reader.fail(node, f"{where}: task is missing")
    task = reader.text(keys["task"], f"{where}.task").strip()
    if not task:
        raise reader.fail(keys["task"], f"{where}.task must name a task")
    kind = reader.text(keys["kind"], f"{where}.kind").strip() if "kind" in keys else kind_of(task)
    if kind is None:
        raise reader.fail(
            keys["task"], f"{where}: the task is not in the task catalog; give its answer kind (kind:)"
        )
    if kind not in ANSWER_KINDS:
        raise reader.fail(keys.get("kind", node), f"{where}.kind must be one of {', '.join(ANSWER_KINDS)}")
    if ("at" in keys) == ("between" in keys):
        raise reader.fail(node, f"{where}: give the bag time(s) `at` or a span `between`, one of them")
    at: tuple[float, ...] = ()
    between: tuple[float, float] | None = None
    if "at" in keys:
        at = _times(reader, keys["at"], f"{where}.at")
    else:
        span = keys["between"]
        if not isinstance(span, yaml.SequenceNode) or len(span.value) != 2:
            raise reader.fail(span, f"{where}.between must be [start, end] in seconds")
        start, end = (reader.number(v, f"{where}.between") for v in span.value)
        if end < start:
            raise reader.fail(span, f"{where}.between ends before it starts")
        between = (start, end)
    if ("answer" in keys) == ("answers" in keys):
        raise reader.fail(node, f"{where}: give `answer` or a list `answers`, one of them")
    if "answer" in keys:
        answer_nodes = [keys["answer"]]
    else:
        listed = keys["answers"]
        if not isinstance(listed, yaml.SequenceNode) or not listed.value:
            raise reader.fail(listed, f"{where}.answers must list at least one answer")
        if len(listed.value) > _MAX_ANSWERS:
            raise reader.fail(listed, f"{where}.answers holds more than {_MAX_ANSWERS} answers")
        answer_nodes = list(listed.value)
    answers = tuple(
        _parsed(reader, n, kind, f"{where}.answer" if "answer" in keys else f"{where}.answers[{i}]")
        for i, n in enumerate(answer_nodes)
    )
    tolerances = (
        reader.tolerances(keys["tolerances"], defaults, f"{where}.tolerances")
        if "tolerances" in keys
        else defaults
    )
    return Label(
        index=index,
        line=_line(node),
        task=task,
        kind=kind,
        answers=answers,
        at=at,
        between=between,
        instruction=reader.text(keys["instruction"], f"{where}.instruction")
        if "instruction" in keys
        else None,
        step=reader.text(keys["step"], f"{where}.step") if "step" in keys else None,
        tolerances=tolerances,
        note=reader.text(keys["note"], f"{where}.note") if "note" in keys else "",
    )


def labels_from_text(
    text: str, source: str = "<labels>", catalog: TaskCatalog | None = None, *, libyaml: bool = True
) -> LabelSet:
    """The labels of a labels file's text; `catalog` gives each task's answer kind (default: the shipped
    catalog). libyaml: PyYAML's C loader where it has one (False: the Python loader, as without libyaml)."""
    loader: Any = None
    try:
        try:
            loader = _loader(text, libyaml)
            root = loader.get_single_node()
        except yaml.reader.ReaderError as exc:
            raise BagError(
                f"labels file {source}: a character YAML does not allow (character {exc.position})"
            ) from None
        except _Refused as exc:
            line = int(exc.mark.line) + 1
            raise BagError(f"labels file {source}, line {line}: {exc}") from None
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise BagError(f"labels file {source}{where}: {_problem(exc.problem)}") from None
        except yaml.YAMLError:
            raise BagError(f"labels file {source}: not valid YAML") from None
        reader = _Reader(loader, source)
        if root is None:
            raise BagError(f"labels file {source} is empty")
        try:
            return _label_set(reader, root, source, catalog)
        except yaml.constructor.ConstructorError as exc:
            mark = exc.problem_mark
            where = f", line {mark.line + 1}" if mark is not None else ""
            raise BagError(f"labels file {source}{where}: {_problem(exc.problem)}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _label_set(reader: _Reader, root: Any, source: str, catalog: TaskCatalog | None) -> LabelSet:
    top = reader.mapping(root, _TOP_KEYS, "the file")
    if "version" in top:
        version = reader.value(top["version"])
        if version != LABEL_VERSION:
            raise reader.fail(top["version"], f"version must be {LABEL_VERSION}")
    if "labels" not in top:
        raise reader.fail(root, "labels is missing (a list of labels)")
    listed = top["labels"]
    if not isinstance(listed, yaml.SequenceNode):
        raise reader.fail(listed, "labels must be a list of labels")
    if len(listed.value) > _MAX_LABELS:
        raise reader.fail(listed, f"more than {_MAX_LABELS} labels")
    bag = reader.text(top["bag"], "bag").strip() if "bag" in top else ""
    defaults = (
        reader.tolerances(top["tolerances"], LabelTolerances(), "tolerances")
        if "tolerances" in top
        else LabelTolerances()
    )
    catalog_ = catalog if catalog is not None else TaskCatalog.load()

    def kind_of(task: str) -> str | None:
        return catalog_.tasks[task].answer_kind if task in catalog_.tasks else None

    labels = tuple(_label(reader, node, i, defaults, kind_of) for i, node in enumerate(listed.value))
    return LabelSet(labels, bag, source)
