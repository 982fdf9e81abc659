"""The core of tsfix: rules, the facts they read, the pipeline, validation and the linter.

The public Python API is the ``tsfix`` package itself (``tsfix.run``, ``tsfix.Options``,
``tsfix.__version__``); see ``codemods/api/__init__.py``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tsfix")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
