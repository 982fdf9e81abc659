"""Reading, discovering and atomically writing source files, byte-faithfully.

A file is decoded with its PEP 263 encoding (UTF-8 by default, BOM kept) and, when it uses
``\\r\\n`` line endings throughout, processed with ``\\n`` and converted back on output, so that
everything outside the rewritten lines is byte-identical.

:func:`write_source` is the one place tsfix writes a source file: ``tsfix apply``, a write
restored from the cache and the interactive review all go through it.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fnmatch
import io
import os
import re
import signal
import stat
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import FrameType

# Folders no user means to rewrite (black's defaults, plus virtualenvs and caches).
DEFAULT_EXCLUDED_DIRS = frozenset({
    ".git", ".hg", ".svn", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".nox", ".tox",
    ".venv", "venv", ".eggs", "_build", "buck-out", "build", "dist", "__pycache__",
    "node_modules", "site-packages",
})
GENERATED_MARKER = "@" + "generated"   # split so that this file is not itself "generated"


class SourceError(Exception):
    """A file that cannot be read or decoded; the message names the file and the place."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


@dataclass
class SourceText:
    path: Path
    text: str             # with "\n" line endings when the file used "\r\n" throughout
    encoding: str
    crlf: bool

    def encode(self, text: str) -> bytes:
        return (text.replace("\n", "\r\n") if self.crlf else text).encode(self.encoding)


def read_source(path: Path) -> SourceText:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(path, f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise SourceError(path, f"{path}:1: {_encoding_problem(data, exc.msg)}") from exc
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SourceError(path, f"{path}:{line}: not valid {encoding}: cannot decode byte "
                          f"0x{data[exc.start]:02x} (declare the encoding with a "
                          "'# -*- coding: ... -*-' line or save the file as UTF-8)") from exc
    # Only files that end every line with \r\n are converted; mixed endings stay as they are.
    crlf = "\r\n" in text and text.count("\r") == text.count("\n") == text.count("\r\n")
    if crlf:
        text = text.replace("\r\n", "\n")
    return SourceText(path, text, encoding, crlf)


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)


def _encoding_problem(data: bytes, message: str) -> str:
    """What :func:`tokenize.detect_encoding` found wrong, in words that say what to do."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return ("UTF-16 text (the file starts with a UTF-16 byte order mark); Python source "
                "is UTF-8 unless a coding line says otherwise: save it as UTF-8")
    cookie = _COOKIE.search(b"\n".join(data.removeprefix(codecs.BOM_UTF8).splitlines()[:2]))
    if data.startswith(codecs.BOM_UTF8) and cookie is not None:
        declared = cookie.group(1).decode("ascii", "replace")
        return (f"the file starts with a UTF-8 byte order mark but its coding line declares "
                f"{declared}; remove one of them")
    return message


def is_generated(text: str) -> bool:
    return GENERATED_MARKER in text[:2048]


def discover(paths: list[Path], root: Path | None, exclude: list[str],
             warnings: list[str] | None = None) -> Iterator[Path | SourceError]:
    """Python files under ``paths`` in a stable order; missing paths come out as errors.
    ``warnings`` receives one line per given folder without a Python file to process."""
    seen: set[Path] = set()
    for given in paths:
        if not given.exists():
            yield SourceError(given, f"{given}: no such file or directory")
            continue
        candidates = [given] if given.is_file() else _walk(given)
        found = excluded = 0
        for path in candidates:
            try:
                resolved = path.resolve()
            except (OSError, RuntimeError):
                # A link to itself, or links that point at each other (RuntimeError up to
                # Python 3.12, OSError ELOOP after).
                found += 1
                yield SourceError(path, f"{path}: cannot read: symbolic link loop "
                                        f"({path} -> {_link_target(path)})")
                continue
            if path is not given and _excluded(resolved, root, exclude):
                excluded += 1
                continue
            found += 1
            if resolved in seen:
                continue
            seen.add(resolved)
            yield path
        if not found and warnings is not None:
            why = f" ({excluded} excluded by [tool.tsfix] exclude)" if excluded else ""
            warnings.append(f"{given}: no Python files found{why}")


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _walk(folder: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in DEFAULT_EXCLUDED_DIRS
                             and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield Path(dirpath) / name


def _excluded(path: Path, root: Path | None, patterns: list[str]) -> bool:
    if not patterns:
        return False
    relative = path.relative_to(root).as_posix() if root and path.is_relative_to(root) else \
        path.as_posix()
    return any(fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(path.name, pattern)
               for pattern in patterns)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT), SIGTERM or the run's time limit (SIGALRM, ``--timeout-total``) that
    arrives inside the block is raised as it ends, so that a write and the record that it
    happened are never separated. The handlers are swapped for the block, not the thread's
    signal mask: with other threads running (validation drivers, worker pipes) the kernel
    hands a signal the main thread blocks to one of them, and Python still runs its handler
    in the main thread, inside the block (measured). Handlers run only in the main thread:
    elsewhere the block defers nothing."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names = ("SIGINT", "SIGTERM", "SIGALRM")
    stops = [getattr(signal, name) for name in names if hasattr(signal, name)]
    caught: list[tuple[int, FrameType | None]] = []

    def later(signum: int, frame: FrameType | None) -> None:
        caught.append((signum, frame))

    previous = {signum: signal.signal(signum, later) for signum in stops}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if caught:
            signum, frame = caught[0]
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler != signal.SIG_IGN:
                signal.raise_signal(signum)         # the default action, as if not deferred


class WriteError(Exception):
    """A file could not be written; the message says why (without the file's name)."""


def write_source(path: Path, text: str, like: SourceText | None = None) -> None:
    """Replace the source file ``path`` with ``text``, in the encoding and line endings of
    ``like`` (the file as it was read), else of the file as it is now. Atomic: the file is
    either as it was or ``text``. Raises :class:`WriteError`."""
    try:
        source = like if like is not None else read_source(path)
        write_atomic(path, source.encode(text))
    except SourceError as exc:
        raise WriteError(str(exc)) from exc
    except (OSError, UnicodeEncodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise WriteError(why) from exc


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one rename, keeping its permission bits. A symlink is
    written through: its target is replaced and the link stays. A file without write
    permission is refused (PermissionError), even where the rename would be allowed."""
    path = path.resolve()
    mode = path.stat().st_mode & 0o7777
    # The rename would replace a file its owner made read-only (and root's writes pass every
    # permission check): refuse, as black and ruff do.
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(errno.EACCES, f"the file is read-only (mode {mode:04o}); make it "
                                            "writable to let tsfix rewrite it")
    if not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, f"permission denied (mode {mode:04o}, owner uid "
                                            f"{path.stat().st_uid})")
    import tempfile

    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tsfix")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
