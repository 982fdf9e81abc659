"""Whole-zoo runs: the rewrite phase in several processes gives what one process gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import model_source
from tsfix.codemods.engine import PARALLEL_MIN_FILES, Options, run


def _zoo(root: Path, models: int) -> Path:
    """``models`` lift-branch candidates plus files every run must also handle: one that does
    not parse, one that is not a model, one model with nothing to rewrite."""
    zoo = root / "zoo"
    for i in range(models):
        (zoo / f"family{i % 3}").mkdir(parents=True, exist_ok=True)
        (zoo / f"family{i % 3}" / f"model_{i:02d}.py").write_text(
            model_source(f"Net{i}", flag=f"use_{i}"))
    (zoo / "broken.py").write_text("class Broken(nn.Module:\n    pass\n")
    (zoo / "utils.py").write_text("def helper(x):\n    return x\n")
    (zoo / "plain.py").write_text(model_source().replace("if self.use_act:", "if True:"))
    return zoo


def _comparable(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key != "rewrite_processes"}


def test_parallel_rewrite_matches_one_process(tmp_path: Path) -> None:
    zoo = _zoo(tmp_path, PARALLEL_MIN_FILES + 6)
    options = {"rules": ["lift-branch"], "verify": False, "mode": "diff"}

    alone = run([zoo], Options(**options, jobs=1))
    together = run([zoo], Options(**options, jobs=2))

    assert alone.rewrite_processes == 0
    assert together.rewrite_processes >= 1      # the work left this process
    assert _comparable(together.to_json()) == _comparable(alone.to_json())
    statuses = {f.display.rsplit("/", 1)[-1]: f.status for f in together.files}
    assert statuses["broken.py"] == "failed" and statuses["utils.py"] == "skipped"
    assert statuses["plain.py"] == "unchanged"
    assert sum(status == "changed" for status in statuses.values()) == PARALLEL_MIN_FILES + 6
    # Results keep discovery order whatever order the processes finished in.
    assert [f.path for f in together.files] == [f.path for f in alone.files]


def test_parallel_write_writes_what_one_process_writes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    zoos = [_zoo(first, PARALLEL_MIN_FILES), _zoo(second, PARALLEL_MIN_FILES)]

    run([zoos[0]], Options(rules=["lift-branch"], verify=False, jobs=1))
    result = run([zoos[1]], Options(rules=["lift-branch"], verify=False, jobs=2))

    assert result.rewrite_processes >= 1
    written = sorted(p.relative_to(zoos[1]) for p in zoos[1].rglob("*.py"))
    assert written == sorted(p.relative_to(zoos[0]) for p in zoos[0].rglob("*.py"))
    for relative in written:
        assert (zoos[1] / relative).read_text() == (zoos[0] / relative).read_text()
    assert "use_0: Optional[bool] = None" in (zoos[1] / "family0" / "model_00.py").read_text()


def test_few_files_are_rewritten_in_this_process(tmp_path: Path) -> None:
    zoo = _zoo(tmp_path, 3)
    result = run([zoo], Options(rules=["lift-branch"], verify=False, mode="diff", jobs=4))
    assert result.rewrite_processes == 0
    assert sum(f.status == "changed" for f in result.files) == 3
