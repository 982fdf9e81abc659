"""tsfix: codemods that make PyTorch model code scriptable and exportable.

The public Python API is :func:`tsfix.codemods.engine.run` (what ``tsfix apply`` calls) and the
rule registry in :mod:`tsfix.codemods.registry`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tsfix")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
