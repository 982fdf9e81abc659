"""``[tool.tsfix]`` configuration and the example inputs that drive validation.

Configuration comes from the nearest ``pyproject.toml`` above the given paths that has a
``[tool.tsfix]`` table (or from ``--config``)::

    [tool.tsfix]
    rules = ["lift-branch"]          # default for --rule
    exclude = ["build/**", "legacy/*.py"]   # globs, relative to this file
    line-length = 100                # else [tool.black] line-length, else 88
    timeout = 120                    # seconds per file's validation
    timeout-total = 3600             # seconds for the whole run (--timeout-total); else none
    model-budget = 600               # seconds of repair rounds per configured model; else none
    require-verified = false
    unsafe-fixes = false             # fixes that change what callers may pass (--unsafe-fixes)
    auto-examples = true             # guess inputs for classes without an example table
    target = "torchscript"           # or "onnx", "export": what the rewrite must serve (--target)
    executor = "local"               # or "ray": where validation jobs run (--executor)
    ray-address = "ray://head:10001" # the Ray cluster (--ray-address); else RAY_ADDRESS or a
                                     # local Ray instance started for the run

    [tool.tsfix.examples."models/custom.py:CustomModel"]
    init = [{ branch_testing = true }, { branch_testing = false }]
    inputs = ["rand(1, 3, 64, 64)"]
    kwargs = { }

    [tool.tsfix.examples."models/attention.py:Attention"]
    init = [{ heads = 2 }]
    calls = [                        # several calls per instance, instead of inputs/kwargs
        { inputs = ["randn(2, 8, 16)"] },
        { inputs = ["randn(2, 8, 16)"], kwargs = { temperature = 0.5 } },
    ]

    [[tool.tsfix.examples."models/attention.py:Masked".calls]]   # the same, one table each
    inputs = ["randn(2, 8, 16)"]
    [[tool.tsfix.examples."models/attention.py:Masked".calls]]
    inputs = ["randn(2, 8, 16)"]
    kwargs = { temperature = 0.5, mask = "ones(2, 8, dtype=bool)" }

    [tool.tsfix.examples."models/tts.py:Decoder"]
    factory = "examples_module:function"

The configurations validated are every ``init`` table times every call (``calls``, or the one
call ``inputs``/``kwargs``), so parity covers calls that rely on default argument values and
calls that pass other values. Each instance is built once per ``init`` table and called with
every call; verdict reasons name the instance and, when there are several calls, the call
(``init[1] call[0]``). ``calls`` cannot be combined with top-level ``inputs``/``kwargs`` or with
``factory``; an empty ``calls`` list is an error.

Tensor strings are a small language parsed with :mod:`ast` (never evaluated): ``randn``,
``rand``, ``zeros``, ``ones`` (shape as arguments or one tuple), ``randint(low, high, (shape))``,
``arange(n)`` / ``arange(start, end)``, each with an optional ``dtype=``. A string that looks
like a call to anything else is an error, so a typo is not silently passed on as a string.
Other TOML values are passed as they are, lists and tables recursively.

A mistake in one example table does not stop a run: it is kept as that class's
:class:`ExampleError` and reported against the class. Mistakes in the rest of ``[tool.tsfix]``
are a :class:`ConfigError` (exit code 2).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tsfix.codemods.rules.names import TARGETS as TARGETS

if TYPE_CHECKING:
    from tsfix.codemods.validation.protocol import Example

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TENSOR_FUNCTIONS = ("randn", "rand", "zeros", "ones", "randint", "arange")
DTYPES = ("float16", "float32", "float64", "bfloat16", "half", "float", "double", "int8",
          "int16", "int32", "int64", "uint8", "int", "long", "bool", "complex64", "complex128")
TENSOR_KEY = "__tensor__"

_LOOKS_LIKE_CALL = re.compile(r"^\s*[A-Za-z_][\w.]*\(")   # name( ... : meant as a tensor
_KNOWN_KEYS = {"rules", "exclude", "line-length", "timeout", "timeout-total", "model-budget",
               "require-verified",
               "unsafe-fixes", "auto-examples", "target", "allow-unscriptable", "examples",
               "executor", "ray-address"}
# Where validation jobs run: "local" worker processes (validation/pool.py) or Ray tasks
# (validation/ray_executor.py, the ray extra).
EXECUTORS = ("local", "ray")
RAY_MISSING = ('executor "ray" needs Ray, which is not installed: pip install "tsfix[ray]" '
               '(the ray extra)')
_EXAMPLE_KEYS = {"init", "inputs", "kwargs", "calls", "factory"}
_CALL_KEYS = {"inputs", "kwargs"}


class ConfigError(Exception):
    """The configuration as a whole cannot be used."""


class ExampleError(Exception):
    """One example table is wrong; only its class is affected."""


@dataclass
class ExampleCall:
    """One forward() call: positional and keyword arguments (tensor descriptions inside)."""

    inputs: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExampleSpec:
    """How to build and call one class. Tensors are kept as JSON-able descriptions; the
    validation worker turns them into tensors, so the parent process never needs torch."""

    key: str
    init: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    inputs: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    factory: str | None = None
    # Several calls per instance (``calls = [...]``); None: the one call inputs/kwargs.
    calls: list[ExampleCall] | None = None
    # No table: the worker builds the class with its defaults and guesses an input from its
    # first layer (``automatic``).
    auto: bool = False

    @classmethod
    def automatic(cls, key: str) -> ExampleSpec:
        return cls(key, auto=True)

    def call_list(self) -> list[ExampleCall]:
        """The calls made on every instance: ``calls``, else the one ``inputs``/``kwargs``."""
        if self.calls is not None:
            return self.calls
        return [ExampleCall(self.inputs, self.kwargs)]

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "init": self.init, "inputs": self.inputs,
                "kwargs": self.kwargs, "factory": self.factory, "auto": self.auto,
                "calls": [{"inputs": c.inputs, "kwargs": c.kwargs} for c in self.call_list()]}

    def to_example(self) -> Example:
        """What a validation job carries (:mod:`tsfix.codemods.validation.protocol`)."""
        from tsfix.codemods.validation.protocol import Example
        from tsfix.codemods.validation.protocol import ExampleCall as CallArguments

        return Example(self.key, tuple(self.init),
                       tuple(CallArguments(tuple(c.inputs), c.kwargs) for c in self.call_list()),
                       self.factory, self.auto)


@dataclass
class Config:
    root: Path | None = None          # folder of the pyproject.toml; example paths are relative
    source: Path | None = None
    rules: list[str] | None = None
    exclude: list[str] = field(default_factory=list)
    line_length: int = 88
    timeout: float = 120.0
    # The whole run's time limit (--timeout-total): decided files are kept, the rest left as
    # they were. None: no limit.
    timeout_total: float | None = None
    # Seconds the repair loop may spend on one configured model (--model-budget): no round
    # starts that cannot finish within it. None: no limit but the rounds and the run's.
    model_budget: float | None = None
    require_verified: bool = False
    unsafe_fixes: bool = False
    # Classes without an example table are validated on a guessed input (validation_worker).
    auto_examples: bool = True
    # A configured model that does not script end to end fails the run unless this is set.
    allow_unscriptable: bool = False
    # "torchscript", or "onnx": lift-branch emits the exportable form, and validation also
    # exports every rewritten class and runs it in onnxruntime.
    target: str = "torchscript"
    # Where validation jobs run: "local" (worker processes) or "ray" (Ray tasks).
    executor: str = "local"
    # The Ray cluster to connect to ("ray://host:10001", "host:6379", "auto"); None: RAY_ADDRESS,
    # else a local Ray instance started for the run.
    ray_address: str | None = None
    # (resolved file path, class name) -> spec, or the error that makes the spec unusable
    examples: dict[tuple[Path, str], ExampleSpec | ExampleError] = field(default_factory=dict)
    # (resolved file path, class name) -> the table's key as written ("models/net.py:Net")
    example_keys: dict[tuple[Path, str], str] = field(default_factory=dict)

    def example_for(self, path: Path, class_name: str, *, resolved: bool = False
                    ) -> ExampleSpec | ExampleError | None:
        """``resolved``: ``path`` is resolved already (resolving costs a stat per folder)."""
        return self.examples.get((path if resolved else path.resolve(), class_name))

    def examples_in(self, path: Path, *, resolved: bool = False
                    ) -> dict[str, ExampleSpec | ExampleError]:
        """Class name -> spec (or its error) for every example table naming ``path``."""
        target = path if resolved else path.resolve()
        return {name: spec for (file, name), spec in self.examples.items() if file == target}


def find_pyproject(paths: list[Path]) -> Path | None:
    """The nearest pyproject.toml with a [tool.tsfix] table at or above the common parent."""
    resolved = [p.resolve() for p in paths] or [Path.cwd().resolve()]
    common = resolved[0] if resolved[0].is_dir() else resolved[0].parent
    for p in resolved[1:]:
        while not p.is_relative_to(common):
            common = common.parent
    for folder in (common, *common.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                return candidate  # load_config reports the problem with the file's name
            if "tsfix" in data.get("tool", {}):
                return candidate
        if (folder / ".git").exists():
            break
    return None


def load_config(path: Path | None) -> Config:
    if path is None:
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8: {exc.reason}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    tool = data.get("tool", {})
    table = tool.get("tsfix", {})
    where = f"{path}: [tool.tsfix]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = set(table) - _KNOWN_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                          f"(known: {', '.join(sorted(_KNOWN_KEYS))})")
    config = Config(root=path.parent.resolve(), source=path)
    black = tool.get("black", {})
    black_length = black.get("line-length") if isinstance(black, dict) else None
    length_from = (f"{where} line-length" if "line-length" in table
                   else f"{path}: [tool.black] line-length")
    default_length = 88 if black_length is None else black_length
    config.line_length = _typed(table.get("line-length", default_length), int, length_from)
    if config.line_length <= 0:
        raise ConfigError(f"{length_from}: expected a positive number of columns, "
                          f"got {config.line_length}")
    config.timeout = float(_typed(table.get("timeout", 120), (int, float), f"{where} timeout"))
    if config.timeout <= 0:
        raise ConfigError(f"{where} timeout: expected a positive number of seconds, "
                          f"got {config.timeout:g}")
    if "timeout-total" in table:
        config.timeout_total = float(_typed(table["timeout-total"], (int, float),
                                            f"{where} timeout-total"))
        if config.timeout_total <= 0:
            raise ConfigError(f"{where} timeout-total: expected a positive number of seconds, "
                              f"got {config.timeout_total:g}")
    if "model-budget" in table:
        config.model_budget = float(_typed(table["model-budget"], (int, float),
                                           f"{where} model-budget"))
        if config.model_budget <= 0:
            raise ConfigError(f"{where} model-budget: expected a positive number of seconds, "
                              f"got {config.model_budget:g}")
    config.require_verified = _typed(table.get("require-verified", False), bool,
                                     f"{where} require-verified")
    config.unsafe_fixes = _typed(table.get("unsafe-fixes", False), bool, f"{where} unsafe-fixes")
    config.auto_examples = _typed(table.get("auto-examples", True), bool,
                                  f"{where} auto-examples")
    config.allow_unscriptable = _typed(table.get("allow-unscriptable", False), bool,
                                       f"{where} allow-unscriptable")
    config.target = _typed(table.get("target", "torchscript"), str, f"{where} target")
    if config.target not in TARGETS:
        raise ConfigError(f"{where} target: expected one of {', '.join(map(repr, TARGETS))}, "
                          f"got {config.target!r}")
    config.executor = _typed(table.get("executor", "local"), str, f"{where} executor")
    if config.executor not in EXECUTORS:
        raise ConfigError(f"{where} executor: expected one of "
                          f"{', '.join(map(repr, EXECUTORS))}, got {config.executor!r}")
    if "ray-address" in table:
        config.ray_address = _typed(table["ray-address"], str, f"{where} ray-address")
    if "rules" in table:
        config.rules = _string_list(table["rules"], f"{where} rules")
    config.exclude = _string_list(table.get("exclude", []), f"{where} exclude")
    examples = _typed(table.get("examples", {}), dict, f"{where} examples")
    for key, spec in examples.items():
        file_part, sep, class_name = key.rpartition(":")
        if not sep or not file_part or not class_name.isidentifier():
            raise ConfigError(f'{path}: [tool.tsfix.examples."{key}"]: the key must be '
                              '"<path relative to pyproject.toml>:<ClassName>"')
        target = (config.root / file_part).resolve()
        config.example_keys[(target, class_name)] = key
        try:
            config.examples[(target, class_name)] = parse_example(key, spec)
        except ExampleError as exc:
            config.examples[(target, class_name)] = ExampleError(
                f'{path}: [tool.tsfix.examples."{key}"] {exc}')
    return config


def require_executor(name: str) -> None:
    """ConfigError (exit 2) when validation jobs cannot run on executor ``name``: an unknown
    name, or "ray" without the ray extra installed (looked up, not imported)."""
    import importlib.util

    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r} (expected one of "
                          f"{', '.join(map(repr, EXECUTORS))})")
    if name == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(RAY_MISSING)


def _typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}: expected {names}, got {value!r}")
    return value


def _string_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return value


def parse_example(key: str, spec: Any) -> ExampleSpec:
    if not isinstance(spec, dict):
        raise ExampleError(f"must be a table, got {spec!r}")
    unknown = set(spec) - _EXAMPLE_KEYS
    if unknown:
        raise ExampleError(f"unknown key(s) {', '.join(sorted(unknown))} "
                           f"(known: {', '.join(sorted(_EXAMPLE_KEYS))})")
    if "factory" in spec:
        if set(spec) != {"factory"}:
            raise ExampleError("factory cannot be combined with init/inputs/kwargs/calls")
        factory = spec["factory"]
        if not isinstance(factory, str) or not re.fullmatch(r"[\w.]+:\w+", factory):
            raise ExampleError(f'factory: expected "module:function", got {factory!r}')
        return ExampleSpec(key, init=[], factory=factory)
    init = spec.get("init", [{}])
    if isinstance(init, dict):
        init = [init]
    if not isinstance(init, list) or not init or not all(isinstance(i, dict) for i in init):
        raise ExampleError(f"init: expected a list of tables (one per instance), got {init!r}")
    parsed_init = [{k: parse_value(v, f"init[{i}].{k}") for k, v in variant.items()}
                   for i, variant in enumerate(init)]
    if "calls" in spec:
        if "inputs" in spec or "kwargs" in spec:
            raise ExampleError("calls cannot be combined with top-level inputs/kwargs "
                               "(put them in one of the calls)")
        calls = spec["calls"]
        if not isinstance(calls, list) or not calls or not all(isinstance(c, dict)
                                                                 for c in calls):
            raise ExampleError("calls: expected a list of tables "
                               f"({{ inputs = [...], kwargs = {{...}} }}), got {calls!r}")
        parsed_calls = []
        for j, call in enumerate(calls):
            unknown = set(call) - _CALL_KEYS
            if unknown:
                raise ExampleError(f"calls[{j}]: unknown key(s) {', '.join(sorted(unknown))} "
                                   f"(known: {', '.join(sorted(_CALL_KEYS))})")
            parsed_calls.append(_parse_call(call, f"calls[{j}]."))
        first = parsed_calls[0]
        return ExampleSpec(key, init=parsed_init, inputs=first.inputs, kwargs=first.kwargs,
                           calls=parsed_calls)
    call = _parse_call(spec, "")
    return ExampleSpec(key, init=parsed_init, inputs=call.inputs, kwargs=call.kwargs)


def _parse_call(table: dict[str, Any], where: str) -> ExampleCall:
    inputs = table.get("inputs", [])
    if not isinstance(inputs, list):
        raise ExampleError(f"{where}inputs: expected a list of positional arguments, "
                           f"got {inputs!r}")
    kwargs = table.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise ExampleError(f"{where}kwargs: expected a table, got {kwargs!r}")
    return ExampleCall(
        inputs=[parse_value(v, f"{where}inputs[{i}]") for i, v in enumerate(inputs)],
        kwargs={k: parse_value(v, f"{where}kwargs.{k}") for k, v in kwargs.items()},
    )


def parse_value(value: Any, where: str) -> Any:
    """A TOML value with tensor strings replaced by ``{"__tensor__": {...}}`` descriptions."""
    if isinstance(value, str) and _LOOKS_LIKE_CALL.match(value):
        return {TENSOR_KEY: parse_tensor(value, where)}
    if isinstance(value, list):
        return [parse_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: parse_value(v, f"{where}.{k}") for k, v in value.items()}
    return value


def parse_tensor(text: str, where: str = "tensor") -> dict[str, Any]:
    """Parse ``randn(1, 3, dtype=float64)`` into ``{"fn": "randn", "args": [1, 3], ...}``."""
    def fail(message: str) -> ExampleError:
        return ExampleError(f"{where}: {message} in {text!r}")

    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise fail(f"cannot parse ({exc.msg})") from None
    if not isinstance(tree, ast.Call) or not isinstance(tree.func, ast.Name):
        raise fail("expected a call like randn(2, 3)")
    fn = tree.func.id
    if fn not in TENSOR_FUNCTIONS:
        raise fail(f"unknown tensor function {fn!r} (expected one of "
                   f"{', '.join(TENSOR_FUNCTIONS)})")
    args = [_literal(a, fail) for a in tree.args]
    dtype = None
    for kw in tree.keywords:
        if kw.arg != "dtype" or not isinstance(kw.value, ast.Name | ast.Attribute):
            raise fail(f"unexpected argument {kw.arg or '**'}= (only dtype= is allowed)")
        dtype = ast.unparse(kw.value).removeprefix("torch.")
        if dtype not in DTYPES:
            raise fail(f"unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    if fn == "randint":
        if len(args) != 3 or not all(isinstance(a, int) and not isinstance(a, bool)
                                     for a in args[:2]):
            raise fail("randint takes (low, high, (shape))")
        shape = _shape(args[2:], fail)
        return {"fn": fn, "low": args[0], "high": args[1], "shape": shape, "dtype": dtype}
    if fn == "arange":
        if not 1 <= len(args) <= 2 or not all(isinstance(a, int | float) for a in args):
            raise fail("arange takes (end) or (start, end)")
        return {"fn": fn, "args": args, "dtype": dtype}
    return {"fn": fn, "shape": _shape(args, fail), "dtype": dtype}


def _literal(node: ast.expr, fail: Any) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.Tuple | ast.List):
        return [_literal(e, fail) for e in node.elts]
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int | float)):
        return -node.operand.value
    raise fail(f"expected numbers, got {ast.unparse(node)!r}")


def _shape(args: list[Any], fail: Any) -> list[int]:
    if len(args) == 1 and isinstance(args[0], list):
        args = args[0]
    if not all(isinstance(a, int) and not isinstance(a, bool) and a >= 0 for a in args):
        raise fail("a shape is non-negative integers")
    return list(args)
