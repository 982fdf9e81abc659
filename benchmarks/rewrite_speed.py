"""Rewrite-phase speed against LibCST's own parse + codegen, on the same files.

    python benchmarks/rewrite_speed.py [DIR ...]      # default: fixtures/ and torch/nn

Prints one ratio per corpus and target (``--rule all`` of ``--target torchscript``, the default,
and of ``--target export``): tsfix's rewrite phase (parse, every rule, black on touched lines,
safety re-parse) over LibCST's parse + codegen. The target is "little more than" 1.0; the
baseline and tsfix run on the same texts in the same process, best of three rounds, timed in
CPU time of the process (the machine is shared: wall time would count the others); tsfix
pauses CPython's cycle collector while it rewrites a file, so the ratio with LibCST given the
same pause is printed too. Then the
same with a rule added that applies to no file (what one more rule costs where it has nothing
to do), and each rule's share of the time (a rule's share includes the shared facts it is the
first to ask for, so the order of the rules moves time between them).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from pathlib import Path

import libcst as cst
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import may_define_module
from tsfix.codemods.pipeline.rewrite import PARSED, RewriteError, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.base import Rule
from tsfix.codemods.rules.registry import select_rules

TARGETS = ("torchscript", "export")


class NothingHere(Rule):
    """A rule that applies to no file: what adding a rule costs where it finds nothing."""

    name = "nothing-here"
    calls = 0
    seconds = 0.0

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        started = time.process_time()
        cls.calls += 1
        cls.seconds += time.process_time() - started
        return False


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
        started = time.process_time()
        work()  # type: ignore[operator]
        timings.append(time.process_time() - started)
    return min(timings)


def main(folders: list[Path]) -> None:
    for target in TARGETS:
        # What `tsfix apply --rule all --target <target>` runs: every rule serving the target
        # (data-dependent-branch serves export only, and most rules torchscript only).
        rules = select_rules(["all"], target)
        print(f"--target {target}: {len(rules)} rules")
        measure(folders, rules)


def measure(folders: list[Path], rules: list[type[Rule]]) -> None:
    print(f"{'corpus':<40} {'files':>6} {'libcst s':>9} {'tsfix s':>9} {'ratio':>6} {'changed':>8}")
    for folder in folders:
        texts = corpus(folder)
        if not texts:
            continue
        baseline = best_of(3, lambda texts=texts: [cst.parse_module(t).code for t in texts])
        changed = [0]

        def tsfix(texts: list[str] = texts, changed: list[int] = changed) -> None:
            changed[0] = 0
            PARSED.clear()      # a run parses each file once in its rewrite phase
            for text in texts:
                with contextlib.suppress(RewriteError):   # unparsable files count as work done
                    changed[0] += rewrite_source(text, RewriteSettings(rules), "bench.py").changed

        ours = best_of(3, tsfix)
        print(f"{str(folder)[-40:]:<40} {len(texts):>6} {baseline:>9.2f} {ours:>9.2f} "
              f"{ours / baseline:>6.2f} {changed[0]:>8}")
        rules.append(NothingHere)
        NothingHere.calls, NothingHere.seconds = 0, 0.0
        more = best_of(3, tsfix)
        rules.pop()
        # The difference of two runs is the machine's noise (a few %); the rule's own work
        # is its may_apply calls, timed inside them.
        print(f"  with a rule that applies to no file: {more / baseline:.2f}x "
              f"({(more - ours) / ours:+.1%}); its own work: {NothingHere.calls // 3} calls "
              f"of may_apply per run, {NothingHere.seconds / 3 / ours:.3%} of the phase")
        # tsfix pauses the cycle collector while it rewrites a file (pipeline/rewrite.py); the
        # ratio above is against LibCST as a user runs it. The same pause given to LibCST too:
        paused = best_of(3, lambda texts=texts: [_paused_libcst(t) for t in texts])
        print(f"  against LibCST with the collector paused as well: {ours / paused:.2f}x")
        print_rule_shares(texts, rules, ours)


def _paused_libcst(text: str) -> str:
    gc.disable()
    try:
        return cst.parse_module(text).code
    finally:
        gc.enable()


def print_rule_shares(texts: list[str], rules: list[type[Rule]], total: float) -> None:
    spent = dict.fromkeys((rule.name for rule in rules), 0.0)
    originals = {rule: rule.transform_module for rule in rules}

    def timed(rule: type[Rule]) -> object:
        def transform_module(self: Rule, tree: cst.Module) -> cst.Module:
            started = time.process_time()
            try:
                return originals[rule](self, tree)
            finally:
                spent[rule.name] += time.process_time() - started
        return transform_module

    for rule in rules:
        rule.transform_module = timed(rule)  # type: ignore[method-assign,assignment]
    try:
        for text in texts:
            with contextlib.suppress(RewriteError):
                rewrite_source(text, RewriteSettings(rules), "bench.py")
    finally:
        for rule, original in originals.items():
            rule.transform_module = original  # type: ignore[method-assign]
    shares = ", ".join(f"{name} {seconds / total:.0%}"
                       for name, seconds in sorted(spent.items(), key=lambda i: -i[1])
                       if seconds / total >= 0.01)
    print(f"  per rule (share of the rewrite phase): {shares}")


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
