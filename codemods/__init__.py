"""The core of tsfix: rules, the facts they read, the pipeline, validation and the linter.

The public Python API is the ``tsfix`` package itself (``tsfix.run``, ``tsfix.Options``,
``tsfix.__version__``); see ``codemods/api/__init__.py``.
"""

from __future__ import annotations

import functools


@functools.cache
def _version() -> str:
    # Read on first use: importlib.metadata costs ~20 ms, which a fully cached run (that never
    # shows the version) should not pay.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tsfix")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'tsfix.codemods' has no attribute {name!r}")
