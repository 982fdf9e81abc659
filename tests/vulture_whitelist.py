"""Names vulture (tests/test_dead_code.py) reports as unused that are used where it cannot see.

Never imported or run: vulture only reads which names appear here. Rule classes and
numpy-to-torch's handlers are not listed: the test adds every one the registry and the handler
table name, so a rule or handler neither reaches stays reported.
"""

# ruff: noqa: B018  (each line only names what vulture should count as used)

from types import SimpleNamespace

_ = SimpleNamespace()

# Module ``__getattr__`` (PEP 562): Python calls it for ``tsfix.__version__`` and the lazily
# imported public API.
_.__getattr__

# Rule class attributes read by the tests and the generated docs (every rule's examples).
_.VALID
_.INVALID

# Parameters that only key an lru_cache: a file parsed again when it changes on disk.
_.mtime_ns

# Attributes set on objects of other libraries, which those libraries read:
# onnxruntime.SessionOptions (validation/onnx_export.py) and the methods TorchScript compiles
# (``_jit_override_qualname``, how torch.jit finds a method's overloads; validation/worker.py).
_.log_severity_level
_.intra_op_num_threads
_._jit_override_qualname
