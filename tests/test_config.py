"""[tool.tsfix] configuration and the example-input language (no torch)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import Project, pyproject_text
from tsfix.codemods.pipeline.config import (
    TENSOR_KEY,
    ConfigError,
    ExampleCall,
    ExampleError,
    ExampleSpec,
    find_pyproject,
    load_config,
    parse_example,
    parse_tensor,
    parse_value,
)

# ---- tensor strings ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("randn(2, 3)", {"fn": "randn", "shape": [2, 3], "dtype": None}),
    ("rand(1, 3, 8, 8)", {"fn": "rand", "shape": [1, 3, 8, 8], "dtype": None}),
    ("zeros(4)", {"fn": "zeros", "shape": [4], "dtype": None}),
    ("ones(2, 2, dtype=float64)", {"fn": "ones", "shape": [2, 2], "dtype": "float64"}),
    ("randn()", {"fn": "randn", "shape": [], "dtype": None}),
    ("  randn( 2 , 3 )  ", {"fn": "randn", "shape": [2, 3], "dtype": None}),
    ("randint(0, 10, (2, 5))",
     {"fn": "randint", "low": 0, "high": 10, "shape": [2, 5], "dtype": None}),
    ("randint(-3, 3, [4], dtype=int32)",
     {"fn": "randint", "low": -3, "high": 3, "shape": [4], "dtype": "int32"}),
    ("arange(5)", {"fn": "arange", "args": [5], "dtype": None}),
    ("arange(1, 7, dtype=torch.int64)", {"fn": "arange", "args": [1, 7], "dtype": "int64"}),
    ("arange(-1.5, 2.5)", {"fn": "arange", "args": [-1.5, 2.5], "dtype": None}),
    ("zeros(3, dtype=torch.bool)", {"fn": "zeros", "shape": [3], "dtype": "bool"}),
])
def test_tensor_strings(text: str, expected: dict) -> None:
    assert parse_tensor(text) == expected


def test_shape_as_one_tuple_equals_shape_as_arguments() -> None:
    assert parse_tensor("randn((2, 3, 4))") == parse_tensor("randn(2, 3, 4)")
    assert parse_tensor("zeros([5])") == parse_tensor("zeros(5)")


@pytest.mark.parametrize(("text", "wording"), [
    ("randm(1, 3)", "unknown tensor function 'randm'"),
    ("torch.randn(2)", "expected a call like randn(2, 3)"),
    ("empty(2)", "unknown tensor function 'empty'"),
    ("randn(2, dtype=float8)", "unknown dtype 'float8'"),
    ("randn(2, dtype=torch.flaot32)", "unknown dtype 'flaot32'"),
    ("randn(2, device='cuda')", "device="),
    ("randn(-1, 3)", "non-negative integers"),
    ("randn(2.5, 3)", "non-negative integers"),
    ("randn(True)", "non-negative integers"),
    ("randn((2, 3), 4)", "non-negative integers"),
    ("randn(n, 3)", "expected numbers"),
    ("randint(0, 10)", "randint takes (low, high, (shape))"),
    ("randint(0.5, 10, (2,))", "randint takes (low, high, (shape))"),
    ("arange()", "arange takes (end) or (start, end)"),
    ("arange(1, 2, 3)", "arange takes (end) or (start, end)"),
    ("randn(2,, 3)", "cannot parse"),
])
def test_bad_tensor_strings_have_clear_errors(text: str, wording: str) -> None:
    with pytest.raises(ExampleError) as caught:
        parse_tensor(text, "inputs[0]")
    message = str(caught.value)
    assert message.startswith("inputs[0]: ")
    assert wording in message
    assert repr(text) in message  # the offending string is quoted back


def test_unknown_function_message_lists_the_known_ones() -> None:
    with pytest.raises(ExampleError) as caught:
        parse_tensor("randm(1, 3)")
    for known in ("randn", "rand", "zeros", "ones", "randint", "arange"):
        assert known in str(caught.value)


# ---- values ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    3, -2, 0.25, True, False, "avg", "relu", "", "a (b", [1, 2, 3], ["x", "y"],
    [[1, 2], [3, [4, 5]]], {"depth": 2, "names": ["a", "b"]}, {},
])
def test_plain_values_pass_through(value: object) -> None:
    assert parse_value(value, "init[0].x") == value


def test_tensor_strings_nested_in_lists_and_tables() -> None:
    parsed = parse_value({"pair": ["randn(2)", 3], "mask": "ones(2, dtype=bool)",
                          "mode": "avg"}, "kwargs")
    assert parsed == {
        "pair": [{TENSOR_KEY: parse_tensor("randn(2)")}, 3],
        "mask": {TENSOR_KEY: parse_tensor("ones(2, dtype=bool)")},
        "mode": "avg",
    }


def test_error_location_in_nested_values() -> None:
    with pytest.raises(ExampleError) as caught:
        parse_value({"pair": [1, "zeros(-1)"]}, "kwargs")
    assert str(caught.value).startswith("kwargs.pair[1]: ")


def test_unbalanced_tensor_string_is_an_error_not_a_string() -> None:
    # A typo in a tensor string must not be passed on to forward() as a plain string.
    with pytest.raises(ExampleError):
        parse_value("randn(2, 3", "inputs[0]")


# ---- example tables ----------------------------------------------------------------------------

def test_example_table_parsed() -> None:
    spec = parse_example("m.py:Net", {
        "init": [{"use_act": True, "dim": 4}, {"use_act": False}],
        "inputs": ["randn(2, 4)", 0.5],
        "kwargs": {"mask": "ones(2, 4, dtype=bool)", "mode": "avg"},
    })
    assert spec.key == "m.py:Net"
    assert spec.init == [{"use_act": True, "dim": 4}, {"use_act": False}]
    assert spec.inputs == [{TENSOR_KEY: {"fn": "randn", "shape": [2, 4], "dtype": None}}, 0.5]
    assert spec.kwargs["mask"] == {TENSOR_KEY: {"fn": "ones", "shape": [2, 4],
                                                "dtype": "bool"}}
    assert spec.kwargs["mode"] == "avg"
    assert spec.factory is None
    assert json.loads(json.dumps(spec.to_json())) == spec.to_json()


def test_example_defaults_and_single_init_table() -> None:
    assert parse_example("m.py:Net", {}).init == [{}]
    spec = parse_example("m.py:Net", {"init": {"dim": 3}, "inputs": ["zeros(1)"]})
    assert spec.init == [{"dim": 3}]


def test_tensor_strings_in_init_are_parsed() -> None:
    spec = parse_example("m.py:Net", {"init": [{"weight": "ones(3)"}]})
    assert spec.init == [{"weight": {TENSOR_KEY: parse_tensor("ones(3)")}}]


def test_factory_form() -> None:
    spec = parse_example("m.py:Net", {"factory": "pkg.examples:make"})
    assert spec.factory == "pkg.examples:make"
    assert spec.to_json()["factory"] == "pkg.examples:make"


@pytest.mark.parametrize(("table", "wording"), [
    ({"factory": "examples"}, 'expected "module:function"'),
    ({"factory": "examples:make()"}, 'expected "module:function"'),
    ({"factory": 3}, 'expected "module:function"'),
    ({"factory": "examples:make", "inputs": ["randn(2)"]}, "cannot be combined"),
    ({"input": ["randn(2)"]}, "unknown key(s) input"),
    ({"init": []}, "init: expected a list of tables"),
    ({"init": [1, 2]}, "init: expected a list of tables"),
    ({"init": "big"}, "init: expected a list of tables"),
    ({"inputs": "randn(2)"}, "inputs: expected a list"),
    ({"kwargs": ["randn(2)"]}, "kwargs: expected a table"),
    ({"inputs": ["randm(2)"]}, "inputs[0]: unknown tensor function 'randm'"),
    ({"init": [{}, {"w": "zeros(x)"}]}, "init[1].w: expected numbers"),
])
def test_bad_example_tables(table: dict, wording: str) -> None:
    with pytest.raises(ExampleError) as caught:
        parse_example("m.py:Net", table)
    assert wording in str(caught.value)


def test_calls_parsed() -> None:
    spec = parse_example("m.py:Attention", {
        "init": [{"heads": 2}, {"heads": 4}],
        "calls": [{"inputs": ["randn(2, 8, 16)"]},
                  {"inputs": ["randn(2, 8, 16)"],
                   "kwargs": {"temperature": 0.5, "mask": "ones(2, 8, dtype=bool)"}}],
    })
    x = {TENSOR_KEY: parse_tensor("randn(2, 8, 16)")}
    assert spec.calls == [
        ExampleCall([x], {}),
        ExampleCall([x], {"temperature": 0.5,
                          "mask": {TENSOR_KEY: parse_tensor("ones(2, 8, dtype=bool)")}}),
    ]
    assert spec.call_list() == spec.calls
    assert spec.init == [{"heads": 2}, {"heads": 4}]
    data = spec.to_json()
    assert data["calls"] == [{"inputs": [x], "kwargs": {}},
                             {"inputs": [x], "kwargs": spec.calls[1].kwargs}]
    assert json.loads(json.dumps(data)) == data


def test_without_calls_the_one_call_is_inputs_and_kwargs() -> None:
    spec = parse_example("m.py:Net", {"inputs": ["zeros(1)"], "kwargs": {"mode": "avg"}})
    assert spec.calls is None
    assert spec.call_list() == [ExampleCall([{TENSOR_KEY: parse_tensor("zeros(1)")}],
                                            {"mode": "avg"})]
    assert spec.to_json()["calls"] == [{"inputs": spec.inputs, "kwargs": {"mode": "avg"}}]


def test_calls_as_array_of_tables(project: Project) -> None:
    path = project.write("pyproject.toml", textwrap.dedent("""\
        [tool.tsfix]

        [[tool.tsfix.examples."m.py:Net".calls]]
        inputs = ["randn(2)"]

        [[tool.tsfix.examples."m.py:Net".calls]]
        inputs = ["randn(2)"]
        kwargs = { scale = 0.5 }
    """))
    spec = load_config(path).example_for(project.root / "m.py", "Net")
    assert isinstance(spec, ExampleSpec)
    assert [c.kwargs for c in spec.call_list()] == [{}, {"scale": 0.5}]
    assert spec.init == [{}]


@pytest.mark.parametrize(("table", "wording"), [
    ({"calls": [{"inputs": ["randn(2)"]}], "inputs": ["randn(2)"]}, "cannot be combined"),
    ({"calls": [{"inputs": ["randn(2)"]}], "kwargs": {}}, "cannot be combined"),
    ({"calls": []}, "calls: expected a list of tables"),
    ({"calls": {"inputs": ["randn(2)"]}}, "calls: expected a list of tables"),
    ({"calls": [{"inputs": ["randn(2)"]}, 3]}, "calls: expected a list of tables"),
    ({"calls": [{}, {"input": ["randn(2)"]}]}, "calls[1]: unknown key(s) input"),
    ({"calls": [{"inputs": "randn(2)"}]}, "calls[0].inputs: expected a list"),
    ({"calls": [{"kwargs": []}]}, "calls[0].kwargs: expected a table"),
    ({"calls": [{}, {"kwargs": {"mask": "ones(x)"}}]}, "calls[1].kwargs.mask: expected numbers"),
    ({"calls": [{"inputs": [1, "randm(2)"]}]}, "calls[0].inputs[1]: unknown tensor function"),
    ({"factory": "ex:make", "calls": [{}]}, "factory cannot be combined"),
])
def test_bad_calls(table: dict, wording: str) -> None:
    with pytest.raises(ExampleError) as caught:
        parse_example("m.py:Net", table)
    assert wording in str(caught.value)


def test_bad_calls_table_fails_only_its_class(project: Project) -> None:
    path = project.write("pyproject.toml", pyproject_text({
        "m.py:Good": {"calls": [{"inputs": ["randn(2)"]}]},
        "m.py:Bad": {"calls": [{"inputs": ["randn(2)"]}], "inputs": ["randn(2)"]},
    }))
    config = load_config(path)
    assert isinstance(config.example_for(project.root / "m.py", "Good"), ExampleSpec)
    bad = config.example_for(project.root / "m.py", "Bad")
    assert isinstance(bad, ExampleError)
    assert '[tool.tsfix.examples."m.py:Bad"]' in str(bad) and "cannot be combined" in str(bad)
    assert set(config.examples_in(project.root / "m.py")) == {"Good", "Bad"}
    assert config.examples_in(project.root / "other.py") == {}


def test_example_table_must_be_a_table() -> None:
    with pytest.raises(ExampleError, match="must be a table"):
        parse_example("m.py:Net", ["randn(2)"])


# ---- load_config -------------------------------------------------------------------------------

def test_examples_resolved_relative_to_pyproject(project: Project) -> None:
    path = project.write("pyproject.toml", pyproject_text({
        "models/net.py:Net": {"init": [{"use_act": True}], "inputs": ["randn(2, 4)"]},
        "models/net.py:Broken": {"inputs": ["randm(2)"]},
    }))
    config = load_config(path)
    assert config.root == project.root.resolve()
    assert config.source == path

    spec = config.example_for(project.root / "models" / "net.py", "Net")
    assert isinstance(spec, ExampleSpec)
    assert spec.inputs == [{TENSOR_KEY: parse_tensor("randn(2, 4)")}]
    # Any spelling of the same path finds it.
    assert config.example_for(project.root / "models" / ".." / "models" / "net.py",
                              "Net") is spec

    broken = config.example_for(project.root / "models" / "net.py", "Broken")
    assert isinstance(broken, ExampleError)
    assert str(path) in str(broken)
    assert '[tool.tsfix.examples."models/net.py:Broken"]' in str(broken)
    assert "randm" in str(broken)

    assert config.example_for(project.root / "models" / "net.py", "Other") is None
    assert config.example_for(project.root / "net.py", "Net") is None


def test_settings_loaded(project: Project) -> None:
    path = project.pyproject(settings="\n".join([
        'rules = "lift-branch"', 'exclude = ["a/**", "b.py"]', "timeout = 30",
        "require-verified = true", "line-length = 99", "unsafe-fixes = true"]))
    config = load_config(path)
    assert config.unsafe_fixes is True
    assert config.rules == ["lift-branch"]
    assert config.exclude == ["a/**", "b.py"]
    assert config.timeout == 30.0
    assert config.require_verified is True
    assert config.line_length == 99


def test_executor_settings(project: Project) -> None:
    path = project.pyproject(settings='executor = "ray"\nray-address = "ray://head:10001"')
    config = load_config(path)
    assert config.executor == "ray" and config.ray_address == "ray://head:10001"
    defaults = load_config(project.pyproject(settings='rules = "lift-branch"'))
    assert defaults.executor == "local" and defaults.ray_address is None


def test_ray_executor_without_ray_is_a_usage_error(project: Project,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # `executor = "ray"` without the ray extra: a ConfigError (exit 2) naming the extra,
    # before any file is touched.
    import importlib.util

    from tsfix.codemods.pipeline.config import require_executor

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ConfigError, match=r'pip install "tsfix\[ray\]"'):
        require_executor("ray")
    require_executor("local")
    with pytest.raises(ConfigError, match="unknown executor 'slurm'"):
        require_executor("slurm")


def test_defaults_without_configuration() -> None:
    config = load_config(None)
    assert config.root is None and config.rules is None and config.examples == {}
    assert config.line_length == 88 and config.require_verified is False
    assert config.unsafe_fixes is False


@pytest.mark.parametrize(("settings", "wording"), [
    ('rulez = ["x"]', "unknown key(s) rulez"),
    ('line-length = "long"', "line-length: expected int"),
    ("line-length = true", "line-length: expected int"),
    ('timeout = "soon"', "timeout: expected"),
    ('require-verified = "yes"', "require-verified: expected bool"),
    ("unsafe-fixes = 1", "unsafe-fixes: expected bool"),
    ("rules = [1, 2]", "rules: expected a list of strings"),
    ("exclude = 3", "exclude: expected a list of strings"),
    ("examples = 3", "examples: expected dict"),
    ('executor = "slurm"', "executor: expected one of 'local', 'ray', got 'slurm'"),
    ("executor = 1", "executor: expected str"),
    ("ray-address = 6379", "ray-address: expected str"),
])
def test_bad_settings_are_config_errors(project: Project, settings: str, wording: str) -> None:
    path = project.pyproject(settings=settings)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    assert wording in str(caught.value)


@pytest.mark.parametrize("timeout", ["0", "-1"])
def test_non_positive_timeout_is_a_config_error(project: Project, timeout: str) -> None:
    # `--timeout` refuses values below 1; the same setting in pyproject.toml must not slip
    # through (a negative one crashes the validation threads, zero times out every file).
    path = project.pyproject(settings=f"timeout = {timeout}")
    with pytest.raises(ConfigError, match="timeout"):
        load_config(path)


@pytest.mark.parametrize("length", ["0", "-5"])
def test_non_positive_line_length_is_a_config_error(project: Project, length: str) -> None:
    # black refuses a line length below 1; tsfix must not accept one and hand it on.
    path = project.pyproject(settings=f"line-length = {length}")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (f"{path}: [tool.tsfix] line-length: expected a positive "
                                 f"number of columns, got {length}")


def test_non_positive_black_line_length_is_a_config_error(project: Project) -> None:
    path = project.write("pyproject.toml", "[tool.black]\nline-length = -5\n\n[tool.tsfix]\n")
    with pytest.raises(ConfigError, match=r"\[tool.black\] line-length: expected a positive"):
        load_config(path)


def test_bad_example_key_is_a_config_error(project: Project) -> None:
    path = project.write("pyproject.toml", '[tool.tsfix.examples."models/net.py"]\n'
                                           'inputs = ["randn(2)"]\n')
    with pytest.raises(ConfigError, match="<ClassName>"):
        load_config(path)


def test_invalid_toml_is_a_config_error(project: Project) -> None:
    path = project.write("pyproject.toml", "[tool.tsfix\nrules = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and "invalid TOML" in str(caught.value)


# ---- line length -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("[tool.tsfix]\n", 88),
    ("[tool.black]\nline-length = 120\n\n[tool.tsfix]\n", 120),
    ("[tool.black]\nline-length = 120\n\n[tool.tsfix]\nline-length = 100\n", 100),
])
def test_line_length_sources(project: Project, text: str, expected: int) -> None:
    assert load_config(project.write("pyproject.toml", text)).line_length == expected


LONG = "use_the_extremely_long_activation_switch"


@pytest.mark.parametrize("black_length", [None, 120])
def test_black_line_length_governs_the_rewrite(project: Project,
                                               black_length: int | None) -> None:
    source = (
        "import torch\nimport torch.nn as nn\n\n\n"
        "class Net(nn.Module):\n"
        f"    def __init__(self, {LONG}=True):\n"
        "        super().__init__()\n"
        f"        self.{LONG} = {LONG}\n\n"
        "    def forward(self, inputs_tensor):\n"
        f"        if self.{LONG}:\n"
        "            inputs_tensor = torch.relu(inputs_tensor)\n"
        "        return inputs_tensor\n"
    )
    one_line = f"    def forward(self, inputs_tensor, {LONG}: Optional[bool] = None):"
    assert 88 < len(one_line) <= 120  # the test is only meaningful in between
    black = f"[tool.black]\nline-length = {black_length}\n\n" if black_length else ""
    project.write("pyproject.toml", black + "[tool.tsfix]\n")
    path = project.write("model.py", source)

    result = project.run(verify=False)

    assert [f.status for f in result.files] == ["changed"]
    lines = path.read_text().splitlines()
    new_lines = [line for line in lines if line not in source.splitlines()]
    assert new_lines and all(len(line) <= (black_length or 88) for line in new_lines)
    if black_length:
        assert one_line in lines
    else:
        assert one_line not in lines
        assert "    def forward(" in lines


# ---- find_pyproject ----------------------------------------------------------------------------

def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_find_pyproject_skips_files_without_tsfix(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    top = _write(tmp_path / "pyproject.toml", "[tool.tsfix]\n")
    _write(tmp_path / "sub" / "pyproject.toml", "[tool.black]\nline-length = 100\n")
    model = _write(tmp_path / "sub" / "deep" / "m.py", "")
    assert find_pyproject([model]) == top
    assert find_pyproject([model.parent]) == top


def test_find_pyproject_prefers_the_nearest(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    _write(tmp_path / "pyproject.toml", "[tool.tsfix]\n")
    inner = _write(tmp_path / "sub" / "pyproject.toml", "[tool.tsfix]\nrules = ['all']\n")
    model = _write(tmp_path / "sub" / "deep" / "m.py", "")
    assert find_pyproject([model]) == inner


def test_find_pyproject_uses_common_parent_of_all_paths(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    top = _write(tmp_path / "pyproject.toml", "[tool.tsfix]\n")
    _write(tmp_path / "a" / "pyproject.toml", "[tool.tsfix]\n")
    a = _write(tmp_path / "a" / "x.py", "")
    b = _write(tmp_path / "b" / "y.py", "")
    assert find_pyproject([a, b]) == top


def test_find_pyproject_stops_at_repository_root(tmp_path: Path) -> None:
    _write(tmp_path / "pyproject.toml", "[tool.tsfix]\n")
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    model = _write(tmp_path / "repo" / "m.py", "")
    assert find_pyproject([model]) is None


def test_find_pyproject_returns_broken_file_for_load_config_to_report(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    broken = _write(tmp_path / "pyproject.toml", "[tool.tsfix\n")
    model = _write(tmp_path / "m.py", "")
    assert find_pyproject([model]) == broken
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(broken)


# ---- what a validation job carries (codemods/validation/protocol.py) ---------------------------

def test_example_spec_becomes_the_typed_example_a_job_carries() -> None:
    from tsfix.codemods.validation.protocol import Example
    from tsfix.codemods.validation.protocol import ExampleCall as Call

    spec = parse_example("m.py:Net", {"init": [{"k": 1}, {"k": 2}],
                                      "calls": [{"inputs": ["randn(2, 3)"]},
                                                {"inputs": [], "kwargs": {"t": 0.5}}]})
    tensor = {TENSOR_KEY: {"fn": "randn", "shape": [2, 3], "dtype": None}}
    assert spec.to_example() == Example("m.py:Net", ({"k": 1}, {"k": 2}),
                                        (Call((tensor,), {}), Call((), {"t": 0.5})))
    # The one call of inputs/kwargs; the older JSON form (no "calls") reads the same.
    single = parse_example("m.py:Net", {"inputs": ["randn(2, 3)"], "kwargs": {"t": 1}})
    assert single.to_example().calls == (Call((tensor,), {"t": 1}),)
    assert Example.from_json({**single.to_json(), "calls": None}) == single.to_example()


def test_jobs_and_results_round_trip_through_the_worker_json() -> None:
    from tsfix.codemods.validation import protocol as p

    example = parse_example("m.py:Net", {"init": [{"k": 1}], "inputs": ["randn(2)"]})
    job = p.ValidationJob(3, "/m.py", "source", (p.JobClass(
        "Net", example.to_example(), ("lift-branch", "annotate"), {"flag": "flag"}, True),),
        ("/root",), target="onnx")
    observe = p.ObserveJob(4, "/m.py", (p.ObserveClass("Net", example.to_example()),))
    for sent in (job, observe):
        assert p.job_from_json(json.loads(p.encode(sent))) == sent
    assert json.loads(p.encode(job))["classes"][0]["rules"] == ["lift-branch", "annotate"]

    verdicts = p.ValidationResult(3, (p.ClassVerdict("Net", "rejected", "re-script: x", 1.5),))
    observed = p.ObservationResult(4, {"Net": {"forward": {"x": "Tensor"}}}, {"Other": "boom"})
    failure = p.JobFailure(5, "Traceback ...")
    for answer in (verdicts, observed, failure):
        assert p.result_from_json(json.loads(p.encode(answer))) == answer
    with pytest.raises(ValueError, match="not a verdict"):
        p.result_from_json({"id": 1, "classes": [{"name": "N", "verdict": "fine",
                                                  "reason": ""}]})


def test_model_budget_is_positive_seconds(tmp_path: Path) -> None:
    from tsfix.codemods.pipeline.config import ConfigError, load_config

    good = tmp_path / "good.toml"
    good.write_text("[tool.tsfix]\nmodel-budget = 90\n")
    assert load_config(good).model_budget == 90.0
    bad = tmp_path / "bad.toml"
    bad.write_text("[tool.tsfix]\nmodel-budget = 0\n")
    with pytest.raises(ConfigError, match="model-budget: expected a positive number"):
        load_config(bad)
