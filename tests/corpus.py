"""The pinned real-code corpus: the pure-Python source of model zoos, from their wheels.

    python tests/corpus.py              # download (once) and print where each package lives

Each pin is one wheel on the package registry, checked against its sha256. The wheel is fetched
with ``pip download --no-deps --only-binary=:all:`` and only its ``*.py`` files are extracted
(nothing is installed or imported). The extracted tree is cached in ``$TSFIX_CORPUS_DIR``, else
``~/.cache/tsfix-corpus``, as ``<name>-<version>/``. A tree is built in a temporary folder beside
the cache and renamed into place only when complete, so an interrupted download never passes for
a finished one; a folder without its manifest is discarded and fetched again.

Used by ``tests/test_corpus.py`` and ``benchmarks/corpus_speed.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MANIFEST = ".tsfix-corpus.json"


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str          # of the wheel file

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


# Pure-Python (py3-none-any) wheels: source separation, speech, vision, speech toolkits and NLP
# (2,466 files, 35.4 MB of source). transformers is pinned to 4.20.1 (855 files, 19.6 MB) rather
# than a 4.5x release (2,214 files, 51.9 MB) so that the test's two passes stay near 5 minutes on
# 2 cores; the corpus with 4.57.6 passes too, but took 12 minutes.
PINS: tuple[Pin, ...] = (
    Pin("asteroid", "0.7.0",
        "ea97a24901d9d9851b4a594171bd7c6dd900fee2c132b9ce045aa09926d489c7"),
    Pin("speechbrain", "1.0.3",
        "9859d4c1b1fb3af3b85523c0c89f52e45a04f305622ed55f31aa32dd2fba19e9"),
    Pin("timm", "1.0.15",
        "5a3dc460c24e322ecc7fd1f3e3eb112423ddee320cb059cc1956fbc9731748ef"),
    Pin("espnet", "202511",
        "4777fd8a121be9bfecd0db34fd8e14894a9b9dc8513db97d3bbded0c20ba886e"),
    Pin("transformers", "4.20.1",
        "d284eaf60b10fee45b24688423b5f7ba2d194f8c2dadf8df76cd58c1a9d08b52"),
)


class CorpusUnavailable(RuntimeError):
    """A pinned wheel could not be downloaded or does not match its pin."""


def cache_root() -> Path:
    configured = os.environ.get("TSFIX_CORPUS_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "tsfix-corpus"


def fetch(pin: Pin, root: Path | None = None) -> Path:
    """The folder holding ``pin``'s extracted ``*.py`` files, downloading it if needed."""
    root = cache_root() if root is None else root
    target = root / pin.key
    if _complete(target, pin):
        return target
    root.mkdir(parents=True, exist_ok=True)
    if target.exists():           # left by an older layout or tampered with: start again
        shutil.rmtree(target)
    _remove_stale(root, pin)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{pin.key}.") as work:
        wheel = _download(pin, Path(work) / "wheel")
        staged = Path(work) / "tree"
        files, size = _extract(wheel, staged)
        if not files:
            raise CorpusUnavailable(f"{wheel.name} holds no .py files")
        manifest = {"name": pin.name, "version": pin.version, "sha256": pin.sha256,
                    "wheel": wheel.name, "files": files, "bytes": size}
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        try:
            os.rename(staged, target)
        except OSError:
            # Another process finished the same pin first; its tree is as good as ours.
            if not _complete(target, pin):
                raise
    return target


def fetch_all(root: Path | None = None) -> dict[Pin, Path]:
    return {pin: fetch(pin, root) for pin in PINS}


def manifest(tree: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((tree / MANIFEST).read_text(encoding="utf-8"))
    return data


def _complete(target: Path, pin: Pin) -> bool:
    try:
        data = manifest(target)
    except (OSError, ValueError):
        return False
    return data.get("sha256") == pin.sha256


def _remove_stale(root: Path, pin: Pin, age_s: float = 3600) -> None:
    """Work folders of interrupted downloads (a killed process leaves its temp folder)."""
    for stale in root.glob(f".{pin.key}.*"):
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > age_s:
                shutil.rmtree(stale)


def _download(pin: Pin, into: Path) -> Path:
    into.mkdir()
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--progress-bar", "off", "--quiet",
               "-d", str(into), f"{pin.name}=={pin.version}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        output = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise CorpusUnavailable(
            f"cannot download {pin.name}=={pin.version} from the package registry "
            f"(pip exit code {done.returncode}, {len(wheels)} wheel(s)):\n  "
            + "\n  ".join(output)
            + "\nThe corpus test needs the registry; set TSFIX_SKIP_CORPUS=1 to skip it "
              "offline (never in CI).")
    wheel = wheels[0]
    digest = file_sha256(wheel)
    if digest != pin.sha256:
        raise CorpusUnavailable(f"{wheel.name}: sha256 {digest} does not match the pin "
                                f"{pin.sha256}")
    return wheel


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _extract(wheel: Path, into: Path) -> tuple[int, int]:
    """Extract the wheel's ``*.py`` files (not its .dist-info); returns (files, bytes)."""
    files = size = 0
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = PurePosixPath(info.filename)
            if (info.is_dir() or name.suffix != ".py" or name.is_absolute()
                    or ".." in name.parts
                    or any(part.endswith((".dist-info", ".data")) for part in name.parts)):
                continue
            destination = into.joinpath(*name.parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, destination.open("wb") as out:
                shutil.copyfileobj(source, out)
            files += 1
            size += info.file_size
    return files, size


if __name__ == "__main__":
    total_files = total_bytes = 0
    for found_pin, tree in fetch_all().items():
        data = manifest(tree)
        files, size = int(str(data["files"])), int(str(data["bytes"]))
        total_files += files
        total_bytes += size
        print(f"{found_pin.key:<24} {files:>6} files {size / 1e6:>7.1f} MB  {tree}")
    print(f"{'total':<24} {total_files:>6} files {total_bytes / 1e6:>7.1f} MB")
