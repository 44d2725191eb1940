"""The media directory the node writes clips into and the server reads (its --allowed-local-media-path).

Names stay inside the directory, files appear atomically and privately, and retention deletes only
our own files.

Confinement (`secure_media_directory`): the node (often root on a robot) must never be steered into writing
elsewhere, so the `media_dir` parameter is checked component by component from `/`, without trusting what
anyone but root or the node's own user could have put in the way:
- the media directory itself must be a real directory (not a symbolic link, whoever owns it), owned by the
  node's effective user, and not writable by group or others (0700 is what the node creates);
- every directory above it must be owned by root or by the node's user and not writable by group or others,
  unless it has the sticky bit (like /tmp: others cannot rename or replace entries they do not own);
- a symbolic link above it is followed only when root owns it (system links such as /var/run -> /run or
  /lib -> usr/lib); a link owned by anyone else, the node's user included, is refused: give the real path.
  A component the node was about to create that turns out to be a link is refused whoever owns it (a race).
Missing components are created 0700 whatever the umask. The directory's identity (device, inode), owner and
mode are checked again before every write, so a directory swapped or opened up later is refused as well.
Files are created with O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600, under a temporary name, then renamed.
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

from cosmos_reasoner_ros.errors import ClipError, MediaPathError, UnsafeMediaDirectory

__all__ = ["MediaRef", "MediaStore", "RetentionPolicy", "secure_media_directory"]


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


_PARAMETER = "media_dir"
_MAX_LINKS = 40  # as the kernel's ELOOP limit
# Creating never follows a link and never reuses a name: a planted file or link makes the write fail.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _unsafe(directory: Path | str, problem: str, fix: str) -> UnsafeMediaDirectory:
    return UnsafeMediaDirectory(f"{_PARAMETER} {directory}: {problem}; {fix}")


def _owner_is_trusted(info: os.stat_result, euid: int) -> bool:
    return info.st_uid in (0, euid)


def _others_can_write(info: os.stat_result) -> bool:
    return bool(info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _check_final(directory: Path | str, real: Path, info: os.stat_result, euid: int) -> None:
    """The media directory itself (`real`; `directory` as given): ours, and no one else can write into it."""
    if stat.S_ISLNK(info.st_mode):
        raise _unsafe(
            directory,
            f"is a symbolic link (to {_readlink(real)})",
            f"set {_PARAMETER} to the real directory, not a link to it",
        )
    if not stat.S_ISDIR(info.st_mode):
        raise _unsafe(directory, "is not a directory", f"set {_PARAMETER} to a directory")
    if info.st_uid != euid:
        raise _unsafe(
            directory,
            f"is owned by uid {info.st_uid}, not by this node's user (uid {euid})",
            f"set {_PARAMETER} to a directory this user owns (or one it can create), or chown it",
        )
    if _others_can_write(info):
        raise _unsafe(
            directory,
            f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})",
            f"chmod 700 {directory}, or set {_PARAMETER} to a private directory",
        )


def _readlink(path: Path | str) -> str:
    try:
        return str(Path(path).readlink())
    except OSError:
        return "?"


def secure_media_directory(directory: Path | str, create: bool = True) -> Path:
    """The media directory as an absolute real path, created 0700 (with 0700 parents) when missing.

    Raises UnsafeMediaDirectory when the rules of this module's docstring are broken, ClipError when the
    directory cannot be created. Relative paths are taken from the current directory.
    """
    euid = os.geteuid()
    given = Path(directory).expanduser()
    path = given if given.is_absolute() else Path.cwd() / given
    pending = list(path.parts[1:])
    resolved = Path(path.anchor or "/")
    links = 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            resolved = resolved.parent  # the real parent: links before it were resolved already
            continue
        candidate = resolved / name
        final = not pending
        made = False
        try:
            info = os.lstat(candidate)
        except FileNotFoundError:
            if not create:
                raise ClipError(f"{_PARAMETER} {given}: {candidate} does not exist") from None
            _make_private(candidate, given)
            made = True
            info = os.lstat(candidate)
        except OSError as exc:
            raise ClipError(
                f"cannot create media directory {given}: {candidate}: {exc.strerror or exc}"
            ) from exc
        if stat.S_ISLNK(info.st_mode):
            if final:
                _check_final(given, candidate, info, euid)  # raises: the media directory itself is a link
            if not made and info.st_uid == 0:
                links += 1
                if links > _MAX_LINKS:
                    raise _unsafe(given, "has too many levels of symbolic links", "give the real path")
                target = candidate.readlink()
                if target.is_absolute():
                    resolved = Path("/")
                pending = list(target.parts[1:] if target.is_absolute() else target.parts) + pending
                continue
            owner = "appeared while it was being created" if made else f"is owned by uid {info.st_uid}"
            raise _unsafe(
                given,
                f"{candidate} is a symbolic link that {owner} (only root's system links are followed)",
                f"set {_PARAMETER} to the real path{_real_hint(path)}",
            )
        if final:
            _check_final(given, candidate, info, euid)
            return candidate
        if not stat.S_ISDIR(info.st_mode):
            raise ClipError(f"cannot create media directory {given}: {candidate} is not a directory")
        if not _owner_is_trusted(info, euid):
            raise _unsafe(
                given,
                f"the directory {candidate} above it is owned by uid {info.st_uid} (neither root nor this "
                f"node's user, uid {euid}), who could replace the media directory",
                f"set {_PARAMETER} to a directory under one owned by root or by this user",
            )
        if _others_can_write(info) and not info.st_mode & stat.S_ISVTX:
            raise _unsafe(
                given,
                f"the directory {candidate} above it is writable by group or others without the sticky bit "
                f"(mode {stat.S_IMODE(info.st_mode):04o}), so they could replace the media directory",
                f"chmod go-w {candidate}, or set {_PARAMETER} elsewhere",
            )
        resolved = candidate
    # Only "/" (or a path of "." and "..") gets here: never a private directory.
    _check_final(given, resolved, os.lstat(resolved), euid)
    return resolved


def _real_hint(path: Path) -> str:
    try:
        return f" ({path.resolve()})"
    except (OSError, RuntimeError):
        return ""


def _make_private(candidate: Path, given: Path) -> None:
    """mkdir 0700 whatever the umask. Whatever appeared there meanwhile is left to the caller's checks."""
    try:
        candidate.mkdir(0o700)
    except FileExistsError:
        return  # made by someone else between lstat and mkdir: the caller refuses a link, checks a directory
    except OSError as exc:
        raise ClipError(f"cannot create media directory {given}: {candidate}: {exc.strerror or exc}") from exc
    # mkdir's mode is reduced by the umask (0700 can only lose bits). fchmod through a descriptor opened
    # without following links: a link swapped in after mkdir fails to open and is refused by the caller.
    try:
        fd = os.open(candidate, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _describe(exc: OSError, directory: Path) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"media directory {directory} is full ({exc.strerror})"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"media directory {directory} is not writable ({exc.strerror})"
    return f"cannot write into media directory {directory}: {exc.strerror or exc}"


class MediaStore:
    """Our files in one directory: `<prefix>-<UTC time>-<random>.<ext>`, mode 0600, in a 0700 directory.

    Writers get a temporary name in the same directory and the file is renamed into place when complete, so
    the server never reads half a clip. Before the rename, the oldest files go until the new one fits the
    retention limits, so our finished files are within them at every instant (temporaries being written are
    hidden and not counted). Thread-safe: names are unique, pruning tolerates concurrent deletes.
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
        self.directory = secure_media_directory(directory)
        info = os.lstat(self.directory)
        self._identity = (info.st_dev, info.st_ino)

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

    def check_directory(self) -> None:
        """Refuse to go on when the directory was replaced or opened up since the store was created (the
        rules of this module's docstring, checked again; a removed directory is created again)."""
        secure_media_directory(self.directory)

    def _create(self, temp: Path) -> int:
        """A new private file, never through a link or over an existing name; returns its descriptor."""
        fd = os.open(temp, _CREATE_FLAGS, 0o600)
        try:
            os.fchmod(fd, 0o600)  # the umask can only have removed bits; this states the mode once more
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_bytes(self, data: bytes, suffix: str) -> Path:
        """Write a complete file atomically; returns its final path."""

        def fill(fd: int, path: Path) -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]

        return self._write(suffix, fill)

    def write_with(self, suffix: str, write: Callable[[Path], None]) -> Path:
        """Let `write` fill a private temporary file (for encoders that need a file name), then rename it.

        OSError from the write (full disk, read-only directory) becomes ClipError; the temporary is removed.
        """
        return self._write(suffix, lambda fd, path: write(path))

    def _write(self, suffix: str, fill: Callable[[int, Path], None]) -> Path:
        self.check_directory()
        final = self.directory / self.new_name(suffix)
        temp = self._temp_path(suffix)
        try:
            # Created private before any encoder opens it by name: opening for writing keeps the mode.
            fd = self._create(temp)
            try:
                fill(fd, temp)
            finally:
                os.close(fd)
            size = os.lstat(temp).st_size
            if size == 0:
                raise ClipError(f"the encoder wrote nothing into {temp.name}")
            # Room is made before the file appears, under the lock every writer takes: the limits hold at
            # every instant, whatever the number of writers (a file named after the write was one too many
            # until its own prune, which a soak listing the directory saw).
            with self._lock:
                now = time.time()
                self._delete(self._beyond_limits(set(), now, room=(1, size)))
                temp.rename(final)
                self._prune_temporaries(now)  # a crashed write's, an hour old
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
        self.check_directory()
        temp = self._temp_path(suffix)
        try:
            os.close(self._create(temp))
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
        """Delete our oldest files beyond the count, byte and age limits (never `keep`); returns them.

        Each write makes room for its file before it appears and removes stale temporaries; this is for limits
        changed since, and age."""
        now = time.time() if now is None else now
        with self._lock:
            deleted = self._delete(self._beyond_limits({Path(p).name for p in keep}, now))
            self._prune_temporaries(now)
        return deleted

    def _beyond_limits(self, protected: set[str], now: float, room: tuple[int, int] = (0, 0)) -> list[Path]:
        """Our files to delete, oldest first, so that the rest with `room` (files, bytes) more are within the
        limits; `protected` names are never chosen but count."""
        policy = self.retention
        files = [(p, i) for p, i in self.own_files() if p.name not in protected]
        kept_count = len(protected) + room[0]
        total = sum(i.st_size for _, i in files) + sum(self._size_of(n) for n in protected) + room[1]
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
        return doomed

    @staticmethod
    def _delete(doomed: list[Path]) -> list[Path]:
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

    def _size_of(self, name: str) -> int:
        """Bytes of our regular file `name`; 0 for anything else (a link is not followed)."""
        try:
            info = os.lstat(self.directory / name)
        except OSError:
            return 0
        return info.st_size if stat.S_ISREG(info.st_mode) else 0

    def _prune_temporaries(self, now: float) -> None:
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.directory):
                if (
                    self._temp.fullmatch(entry.name)
                    and entry.is_file(follow_symlinks=False)
                    and now - entry.stat(follow_symlinks=False).st_mtime > _TEMP_MAX_AGE_S
                ):
                    self._discard(Path(entry.path))
