"""The rewrite phase: read and rewrite every file (first round), and the later rewrites of a
text already read with rules skipping classes (trials, final texts).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline.phases.processes import Rewriters
from tsfix.codemods.pipeline.phases.records import (
    File,
    Observed,
    Rewritten,
    RewrittenAgain,
    ToRewrite,
    ToRewriteAgain,
    internal_error,
)
from tsfix.codemods.pipeline.phases.session import Session, rewritten
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.pipeline.sources import SourceError, is_generated, read_source

if TYPE_CHECKING:

    pass


# How fast the rules get through source, counted high: ParityBench's model files, every rule,
# went at about 60 KB a second (770 KB in 13 s, one process). A round of a few large files is
# worth the rewrite processes when their size says so (Rewriters.map's ``seconds``).
SOURCE_BYTES_PER_SECOND = 100_000


def rewrite_all(todo: list[File], observed: dict[int, Observed], session: Session,
                rewriters: Rewriters) -> dict[int, Rewritten]:
    """Read and rewrite every file (in processes when there are many, or large ones), the
    largest first: the last process to finish is not the one that took the largest last."""
    sizes = {f.index: _size(f.path) for f in todo}
    items = [ToRewrite(f.index, f.path, f.display, observed.get(f.index, Observed()).types)
             for f in sorted(todo, key=lambda f: -sizes[f.index])]
    report = session.reporter("rewrite", len(items))
    answers: list[Rewritten] = rewriters.map(
        _rewrite_file, items, lambda r: report(rewrites=len(r.classes)),
        seconds=sum(sizes.values()) / SOURCE_BYTES_PER_SECOND)
    return {r.index: r for r in sorted(answers, key=lambda r: r.index)}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _rewrite_file(item: ToRewrite, settings: RewriteSettings) -> Rewritten:
    started = time.perf_counter()
    try:
        source = read_source(item.path)
    except SourceError as exc:
        return Rewritten(item.index, "failed", str(exc))
    from tsfix.codemods.facts.syntax import may_define_module
    from tsfix.codemods.pipeline.rewrite import RewriteError, python_syntax_error

    if is_generated(source.text):
        return Rewritten(item.index, "skipped")
    if not may_define_module(source.text):
        # No rule looks at it, but it must still be Python (CPython's parser: a tenth of
        # LibCST's time).
        problem = python_syntax_error(source.text, item.display)
        if problem is not None:
            return Rewritten(item.index, "failed", problem,
                             rewrite_s=round(time.perf_counter() - started, 4))
        return Rewritten(item.index, "skipped")
    try:
        text, classes, skips = rewritten(settings, source.text, item.display, item.observed)
    except RewriteError as exc:
        return Rewritten(item.index, "failed", str(exc),
                         rewrite_s=round(time.perf_counter() - started, 4))
    except Exception as exc:
        return Rewritten(item.index, "failed", internal_error(item.display, exc),
                         rewrite_s=round(time.perf_counter() - started, 4))
    elapsed = round(time.perf_counter() - started, 4)
    if not classes:
        return Rewritten(item.index, "unchanged", skips=skips, rewrite_s=elapsed)
    return Rewritten(item.index, "changed", source=source, text=text, classes=classes,
                     skips=skips, rewrite_s=elapsed)


def rewrite_again(item: ToRewriteAgain, settings: RewriteSettings) -> RewrittenAgain:
    try:
        text, classes, _ = rewritten(settings, item.text, item.display, item.observed, item.skip)
    except Exception as exc:
        return RewrittenAgain(item.key, error=internal_error(item.display, exc))
    return RewrittenAgain(item.key, text, classes)
