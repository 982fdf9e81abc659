"""A black-style cache of per-file outcomes, so a second run over an unchanged zoo skips
parsing, observation and validation.

An entry is keyed by the file's bytes and everything else its outcome depends on: a hash of
tsfix's own source, which stands for its version (so edited rules never reuse old entries; and
reading the installed metadata would cost more than the rest of a cached run), the selected
rules in order, unsafe fixes, line length, automatic examples, the target (torchscript or onnx),
whether validation ran and under which torch version, ``--require-verified``, and the example
specs configured for the file. It holds the file's status, its class verdicts, skips, notes
and the rewritten text.

Other files the outcome depends on: a configured model's verdict, and the verdicts its run gave
to classes of other files, depend on every file of the tree the model imports. Such an entry
lists those files with the sha256 of their bytes when the run ended (``depends``); when one of
them differs or is gone, the entry is not used. Entries are also never stored for outcomes
that depend on the machine rather than the code
(timeouts, worker crashes, internal errors).

Entries are small JSON files under ``$TSFIX_CACHE_DIR`` (default ``~/.cache/tsfix``), written
atomically, one per key, so parallel runs never corrupt each other.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tsfix.codemods.pipeline.report import ClassResult, FileResult, ModelRecord, SkipResult
from tsfix.codemods.pipeline.settings import RunSettings

# Reasons that say the machine, not the code, decided: never cached.
_TRANSIENT = ("timed out", "internal validation error", "worker", "internal error",
              "cannot write")


def default_directory() -> Path:
    configured = os.environ.get("TSFIX_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tsfix"


def code_fingerprint() -> str:
    """A hash of tsfix's own source: a rule edited without a version bump (a developer
    install) must not be answered from entries the old code made. Every module of the package,
    in every subfolder, is hashed with its relative path: a module moved or added between
    folders changes the fingerprint too."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def torch_version() -> str:
    """The installed torch's version, read from its ``version.py`` (torch is not imported,
    nor is the slower ``importlib.metadata`` unless that file says nothing)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return "none"
    with contextlib.suppress(OSError):
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        if found:
            return found.group(1)
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


class Cache:
    def __init__(self, directory: Path, salt: str) -> None:
        self.directory = directory
        self.salt = salt

    @classmethod
    def for_run(cls, directory: Path | None, settings: RunSettings) -> Cache:
        """The cache of a run with ``settings`` (``directory``: None for the default)."""
        salt = json.dumps({"code": code_fingerprint(), **settings.cache_salt(),
                           "torch": torch_version() if settings.verify else None},
                          sort_keys=True)
        return cls(directory or default_directory(), salt)

    def key(self, content: bytes, examples: str) -> str:
        digest = hashlib.sha256()
        for part in (self.salt.encode(), examples.encode(), content):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
        return digest.hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            entry: dict[str, Any] = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if dependencies_changed(entry):
            return None
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self._path(key)
        # A cache that cannot be written only costs speed: never fail a run for it.
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            import tempfile

            handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    json.dump(entry, out)
                os.replace(temporary, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise


def cacheable(result: FileResult) -> bool:
    if result.status == "failed" and (result.error is None or "cannot parse" not in result.error):
        return False
    reasons = ([c.reason for c in result.classes] + [result.error or ""] + result.notes
               + [m.reason for m in result.models])
    return not any(word in reason for reason in reasons for word in _TRANSIENT)


def entry_of(result: FileResult, text: str | None) -> dict[str, Any]:
    """What restores ``result``: its outcome and, for a changed file, the text to write."""
    return {"status": result.status, "error": result.error,
            "classes": [asdict(c) for c in result.classes],
            "skips": [asdict(s) for s in result.skips], "notes": result.notes,
            "observed": result.observed, "diff": result.diff, "text": text,
            "models": [m.to_json() for m in result.models], "depends": result.depends}


def dependencies_changed(entry: dict[str, Any]) -> bool:
    """A file the entry's outcome depends on (a configured model's imports) has other bytes
    than when the entry was stored, or is gone."""
    for path, digest in (entry.get("depends") or {}).items():
        try:
            if hashlib.sha256(Path(path).read_bytes()).hexdigest() != digest:
                return True
        except OSError:
            return True
    return False


def file_digests(paths: list[str] | set[str]) -> dict[str, str]:
    """sha256 of each readable file's bytes, by path (for ``FileResult.depends``)."""
    found = {}
    for path in sorted(paths):
        with contextlib.suppress(OSError):
            found[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return found


def restore(path: Path, display: str, entry: dict[str, Any]) -> tuple[FileResult, str | None]:
    """The outcome a cache entry holds for the file ``path``, and the rewritten text of a
    changed file (None otherwise)."""
    result = FileResult(
        path, display, entry["status"], entry["error"],
        [ClassResult(**{**c, "lines": tuple(c["lines"])}) for c in entry["classes"]],
        [SkipResult(**s) for s in entry["skips"]], entry["diff"],
        notes=list(entry["notes"]), observed=entry["observed"], cached=True,
        new_text=entry["text"] if entry["status"] == "changed" else None,
        models=[ModelRecord.from_json(m) for m in entry.get("models") or []],
        depends=dict(entry.get("depends") or {}))
    text: str | None = entry["text"]
    return result, text
