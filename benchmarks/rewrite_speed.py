"""Rewrite-phase speed against LibCST's own parse + codegen, on the same files.

    python benchmarks/rewrite_speed.py [DIR ...]      # default: fixtures/ and torch/nn

Prints one ratio per corpus: tsfix's rewrite phase (parse, every rule, black on touched lines,
safety re-parse) over LibCST's parse + codegen. The target is "little more than" 1.0; the
baseline and tsfix run on the same texts in the same process, best of three rounds.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import libcst as cst
from tsfix.codemods.facts.syntax import may_define_module
from tsfix.codemods.pipeline.rewrite import RewriteError, rewrite_source
from tsfix.codemods.rules.registry import ALL_RULES


def corpus(folder: Path) -> list[str]:
    texts = []
    for path in sorted(folder.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if may_define_module(text):
            texts.append(text)
    return texts


def best_of(rounds: int, work: object) -> float:
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()  # type: ignore[operator]
        timings.append(time.perf_counter() - started)
    return min(timings)


def main(folders: list[Path]) -> None:
    rules = list(ALL_RULES.values())
    print(f"{'corpus':<40} {'files':>6} {'libcst s':>9} {'tsfix s':>9} {'ratio':>6} {'changed':>8}")
    for folder in folders:
        texts = corpus(folder)
        if not texts:
            continue
        baseline = best_of(3, lambda texts=texts: [cst.parse_module(t).code for t in texts])
        changed = [0]

        def tsfix(texts: list[str] = texts, changed: list[int] = changed) -> None:
            changed[0] = 0
            for text in texts:
                with contextlib.suppress(RewriteError):   # unparsable files count as work done
                    changed[0] += rewrite_source(text, "bench.py", rules).changed

        ours = best_of(3, tsfix)
        print(f"{str(folder)[-40:]:<40} {len(texts):>6} {baseline:>9.2f} {ours:>9.2f} "
              f"{ours / baseline:>6.2f} {changed[0]:>8}")


if __name__ == "__main__":
    default = [Path(__file__).resolve().parent.parent / "fixtures"]
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec and spec.origin:
            default.append(Path(spec.origin).parent / "nn")
    except ImportError:
        pass
    main([Path(p) for p in sys.argv[1:]] or default)
