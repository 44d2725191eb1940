"""The media directory the node writes clips into and the server reads (its --allowed-local-media-path).

Names stay inside the directory, files appear atomically and privately, and retention deletes only
our own files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cosmos_reasoner_ros.errors import ClipError, MediaPathError

__all__ = ["MediaRef", "MediaStore", "RetentionPolicy"]


@dataclass(frozen=True)
class MediaRef:
    """One written clip or image, as the request builder needs it."""

    kind: str  # "video" | "image"
    url: str  # "file:///abs/path.mp4" or "data:video/mp4;base64,..."
    path: Path | None  # None for data: URLs
    mime: str
    size_bytes: int
    encode_s: float
    width: int
    height: int
    camera: str = ""  # camera name; "a+b" for a tiled video
    frames: int = 1
    fps: float = 0.0  # frame rate written into the video's metadata (0 for images)
    duration_s: float = 0.0  # frames / fps: what a reader of the file sees
    reused_frames: int = 0  # frames already encoded for an earlier, overlapping clip


@dataclass(frozen=True)
class RetentionPolicy:
    """Limits on the node's own files in the media directory; 0 disables a limit."""

    max_files: int = 200
    max_bytes: int = 2 * 1024**3
    max_age_s: float = 3600.0


_SUFFIXES = (".mp4", ".jpg", ".png")
_TEMP_MAX_AGE_S = 3600.0  # temporaries of a crashed write


def _describe(exc: OSError, directory: Path) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"media directory {directory} is full ({exc.strerror})"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"media directory {directory} is not writable ({exc.strerror})"
    return f"cannot write into media directory {directory}: {exc.strerror or exc}"


class MediaStore:
    """Our files in one directory: `<prefix>-<UTC time>-<random>.<ext>`, mode 0600, in a 0700 directory.

    Writers get a temporary name in the same directory and the file is renamed into place when complete, so
    the server never reads half a clip. Thread-safe: names are unique, pruning tolerates concurrent deletes.
    """

    def __init__(
        self, directory: Path | str, retention: RetentionPolicy | None = None, prefix: str = "crr"
    ) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,15}", prefix):
            raise ValueError(f"prefix must be a short lowercase name, got {prefix!r}")
        self.prefix = prefix
        self.retention = retention or RetentionPolicy()
        self._own = re.compile(rf"{re.escape(prefix)}-\d{{8}}T\d{{9}}Z-[0-9a-f]{{12}}(?:\.mp4|\.jpg|\.png)")
        self._temp = re.compile(rf"\.{re.escape(prefix)}-tmp-[0-9a-f]{{32}}(?:\.mp4|\.jpg|\.png)")
        self._lock = threading.Lock()
        path = Path(directory).expanduser()
        try:
            if not path.exists():
                path.mkdir(mode=0o700, parents=True)
                path.chmod(0o700)  # mkdir's mode is reduced by the umask
            self.directory = path.resolve(strict=True)
        except OSError as exc:
            raise ClipError(f"cannot create media directory {path}: {exc.strerror or exc}") from exc
        if not self.directory.is_dir():
            raise ClipError(f"media directory {self.directory} is not a directory")

    # -- names ---------------------------------------------------------------------------------------------

    def new_name(self, suffix: str) -> str:
        if suffix not in _SUFFIXES:
            raise ValueError(f"suffix must be one of {', '.join(_SUFFIXES)}, got {suffix!r}")
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now % 1 * 1000):03d}Z"
        return f"{self.prefix}-{stamp}-{uuid.uuid4().hex[:12]}{suffix}"

    def resolve(self, name: str | Path) -> Path:
        """The path of a file directly inside the media directory; MediaPathError for anything else.

        Refused: `..` components, absolute paths elsewhere, subdirectories, and symbolic links (which could
        point anywhere, including at files the server should not see).
        """
        given = Path(name)
        if ".." in given.parts:
            raise MediaPathError(f"path {str(name)!r} contains '..'")
        candidate = given if given.is_absolute() else self.directory / given
        if candidate.parent != self.directory and candidate.parent.resolve() != self.directory:
            raise MediaPathError(
                f"path {str(name)!r} is not directly inside the media directory {self.directory}"
            )
        candidate = self.directory / candidate.name
        if candidate.is_symlink():
            raise MediaPathError(f"path {str(name)!r} is a symbolic link")
        return candidate

    def url_for(self, path: Path) -> str:
        return self.resolve(path).as_uri()

    # -- writing -------------------------------------------------------------------------------------------

    def _temp_path(self, suffix: str) -> Path:
        return self.directory / f".{self.prefix}-tmp-{uuid.uuid4().hex}{suffix}"

    def write_bytes(self, data: bytes, suffix: str) -> Path:
        """Write a complete file atomically; returns its final path."""

        def write(path: Path) -> None:
            with path.open("r+b") as handle:
                handle.write(data)

        return self.write_with(suffix, write)

    def write_with(self, suffix: str, write: Callable[[Path], None]) -> Path:
        """Let `write` fill a private temporary file (for encoders that need a file name), then rename it.

        OSError from the write (full disk, read-only directory) becomes ClipError; the temporary is removed.
        """
        final = self.directory / self.new_name(suffix)
        temp = self._temp_path(suffix)
        try:
            # Created private before any encoder opens it: opening for writing keeps the mode.
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            write(temp)
            if temp.stat().st_size == 0:
                raise ClipError(f"the encoder wrote nothing into {temp.name}")
            temp.replace(final)
        except OSError as exc:
            self._discard(temp)
            raise ClipError(_describe(exc, self.directory)) from exc
        except BaseException:
            self._discard(temp)
            raise
        return final

    @contextlib.contextmanager
    def scratch(self, suffix: str) -> Iterator[Path]:
        """A private temporary file in the media directory, deleted on exit (for inline data: URLs)."""
        temp = self._temp_path(suffix)
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:
            raise ClipError(_describe(exc, self.directory)) from exc
        try:
            yield temp
        except OSError as exc:
            raise ClipError(_describe(exc, self.directory)) from exc
        finally:
            self._discard(temp)

    @staticmethod
    def _discard(path: Path) -> None:
        with contextlib.suppress(OSError):
            path.unlink()

    # -- retention -----------------------------------------------------------------------------------------

    def own_files(self) -> list[tuple[Path, os.stat_result]]:
        """Our finished files (regular files with our name pattern), oldest first."""
        found = []
        try:
            entries = list(os.scandir(self.directory))
        except OSError as exc:
            raise ClipError(f"cannot list media directory {self.directory}: {exc.strerror}") from exc
        for entry in entries:
            if not self._own.fullmatch(entry.name):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # deleted meanwhile
            if stat.S_ISREG(info.st_mode):
                found.append((Path(entry.path), info))
        found.sort(key=lambda item: (item[1].st_mtime_ns, item[0].name))
        return found

    def usage(self) -> tuple[int, int]:
        """(number of our files, their total bytes)."""
        files = self.own_files()
        return len(files), sum(info.st_size for _, info in files)

    def prune(self, keep: Iterable[Path] = (), now: float | None = None) -> list[Path]:
        """Delete our oldest files beyond the count, byte and age limits (never `keep`); returns them."""
        policy = self.retention
        now = time.time() if now is None else now
        protected = {Path(p).name for p in keep}
        with self._lock:
            files = [(p, i) for p, i in self.own_files() if p.name not in protected]
            kept_count = len(protected)
            total = sum(i.st_size for _, i in files) + sum(
                (self.directory / n).stat().st_size for n in protected if (self.directory / n).is_file()
            )
            doomed: list[Path] = []
            for index, (path, info) in enumerate(files):
                remaining = len(files) - index + kept_count
                too_old = policy.max_age_s > 0 and now - info.st_mtime > policy.max_age_s
                too_many = policy.max_files > 0 and remaining > policy.max_files
                too_big = policy.max_bytes > 0 and total > policy.max_bytes
                if not (too_old or too_many or too_big):
                    continue
                doomed.append(path)
                total -= info.st_size
            self._prune_temporaries(now)
        deleted = []
        for path in doomed:
            try:
                path.unlink()
                deleted.append(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise ClipError(
                    f"cannot delete {path.name} from the media directory: {exc.strerror}"
                ) from exc
        return deleted

    def _prune_temporaries(self, now: float) -> None:
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.directory):
                if (
                    self._temp.fullmatch(entry.name)
                    and entry.is_file(follow_symlinks=False)
                    and now - entry.stat(follow_symlinks=False).st_mtime > _TEMP_MAX_AGE_S
                ):
                    self._discard(Path(entry.path))
