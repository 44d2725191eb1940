"""Names from user input (scenario names, sweep values, bag and task names) made safe as one path component,
and paths built only from such components: whatever a scenario, a sweep or an option names, what the bag tools
write stays inside the output folder. A file system allows any bytes but `/` in a name: `printable` makes
such a name text that every report (JSON, HTML, XML, stdout) can carry."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["child", "printable", "safe_name", "writable_file", "writable_folder"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._=+,@-]+")
_MAX = 80


def printable(text: str) -> str:
    """`text` as valid Unicode: a file name's bytes that are not UTF-8 (which Python keeps as lone
    surrogates, and which no UTF-8 file or terminal can carry) shown as \\xNN escapes, any other lone
    surrogate as U+FFFD."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that does not stand for a byte (from a \\udXXX escape)
        return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)


def safe_name(text: str) -> str:
    """One path component for `text`: letters, digits and ._=+,@- kept, every other run of characters one
    `_`, no leading dot, at most 80 characters; a short hash of the original is appended whenever anything
    was changed, so that two different texts never share a folder."""
    name = _UNSAFE.sub("_", text).lstrip(".") or "_"
    if name == text and len(name) <= _MAX:
        return name
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{name[: _MAX - 9]}-{digest}"


def child(root: Path, name: str) -> Path:
    """root / safe_name(name), checked to lie inside root (symbolic links inside root included)."""
    path = root / safe_name(name)
    base = root.resolve()
    if not path.resolve().is_relative_to(base):
        raise BagError(f"{name[:80]!r} would lead outside {root}")
    return path


def writable_folder(path: Path, what: str = "output folder") -> Path:
    """`path` as a folder this process can write into (created when missing); BagError saying why not.
    Checked before a run, so that output that cannot be written is one line before any verdict."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise BagError(f"cannot write the {what} {path}: {exc.strerror or exc}") from None
    return path


def writable_file(path: Path, what: str = "output file") -> Path:
    """`path` as a file this process can create or replace (its folder created when missing); BagError
    saying why not."""
    if path.is_dir():
        raise BagError(f"the {what} {path} is a directory; name a file")
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        raise BagError(f"cannot write the {what} {path}: {exc.strerror or exc}") from None
    return path
