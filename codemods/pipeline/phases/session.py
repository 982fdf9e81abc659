"""What every phase of one run needs (:class:`Session`), a file rewritten with the settings a
rewrite process gets (:func:`rewritten`), and the progress counts of a phase (:class:`Reporter`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline.config import Config
from tsfix.codemods.pipeline.phases.records import Outcome, SkipSet, class_result
from tsfix.codemods.pipeline.report import (
    ClassResult,
    Phase,
    Progress,
    SkipResult,
)
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.validation.protocol import TypeTable

if TYPE_CHECKING:

    from tsfix.codemods.rules.base import Rule


def rewritten(settings: RewriteSettings, text: str, display: str, observed: TypeTable,
              skip: SkipSet = (), compiled_functions: frozenset[str] = frozenset()
              ) -> tuple[str, tuple[ClassResult, ...], tuple[SkipResult, ...]]:
    """``text`` rewritten with ``settings``: the new text, a ClassResult per change and the
    skips. LibCST, black and the rules are imported here, on the first file that needs them."""
    from tsfix.codemods.pipeline.rewrite import rewrite_source

    done = rewrite_source(text, settings, FileContext(display, dict(skip), observed or None,
                                                      compiled_functions))
    return (done.text, tuple(class_result(c) for c in done.changes),
            tuple(SkipResult.of(s) for s in done.skips))


@dataclass
class Session:
    """What every phase of one run needs."""

    rule_names: list[str]
    config: Config
    require_verified: bool
    unsafe_fixes: bool
    target: str = "torchscript"
    verify: bool = True
    workers: int = 1                        # rewrite processes and validation workers
    timeout: float = 120.0                  # per file's validation
    progress: Callable[[Progress], None] | None = None
    # Running totals for the progress display: "rewrites" and one entry per verdict.
    counts: dict[str, int] = field(default_factory=dict)
    processes: int = 0                      # other processes that rewrote files
    fix_rounds: int = 12                    # per configured model (models.py)
    # time.monotonic() when the run's time budget (--timeout-total) ends; None: no limit.
    deadline: float | None = None
    # Seconds of repair rounds per configured model (--model-budget); None: no limit.
    model_budget: float | None = None
    # Called in this process with the outcomes of files as they are decided (their final
    # text known and every configured model reaching them answered), so that the engine
    # writes them before the run is over: a run stopped later keeps them. By file index;
    # the flag: the outcome is complete (no model's record or imports will be added).
    decided: Callable[[dict[int, Outcome], bool], None] | None = None
    # Where validation jobs run: "local" (validation/pool.py) or "ray"
    # (validation/ray_executor.py), and the Ray cluster's address (None: RAY_ADDRESS, else a
    # local Ray instance).
    executor: str = "local"
    ray_address: str | None = None
    # Seconds each phase took, from its first item to its last answered (the summary's time).
    phase_s: dict[str, float] = field(default_factory=dict)
    # Items each phase was given (RunResult.phase_items).
    phase_items: dict[str, int] = field(default_factory=dict)

    @cached_property
    def rules(self) -> tuple[type[Rule], ...]:
        """The rule classes (importing them imports LibCST: only when a file is rewritten)."""
        from tsfix.codemods.rules.registry import select_rules

        return tuple(select_rules(self.rule_names, self.target))

    @cached_property
    def order(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.rule_names)}

    def reporter(self, phase: Phase, total: int) -> _Reporter:
        self.phase_items[phase] = self.phase_items.get(phase, 0) + total
        return _Reporter(self.progress, phase, total, self.counts, self.target, self.phase_s)

    @cached_property
    def settings(self) -> RewriteSettings:
        return RewriteSettings(self.rules, self.config.line_length, self.unsafe_fixes,
                               run=uuid.uuid4().hex)

    @property
    def sys_path(self) -> tuple[str, ...]:
        return (str(self.config.root),) if self.config.root else ()

    def rank(self, rule: str) -> int:
        """A rule's place in registry (``--rule all``) order."""
        return self.order.get(rule, len(self.order))


class _Reporter:
    """Counts one phase's completed items and tells ``Options.progress`` (if any)."""

    def __init__(self, callback: Callable[[Progress], None] | None, phase: Phase, total: int,
                 counts: dict[str, int], target: str = "torchscript",
                 phase_s: dict[str, float] | None = None) -> None:
        self.callback, self.phase, self.total, self.counts = callback, phase, total, counts
        self.target, self.phase_s = target, phase_s
        self.done = 0
        self.last = time.monotonic()
        self._tell()

    def __call__(self, items: int = 1, *, rewrites: int = 0,
                 verdicts: Iterable[str] = ()) -> None:
        self.done += items
        if self.phase_s is not None:
            # A phase's time runs from its reporter's start to its last item; the phases of
            # a run that report under one name (models: validation's, the recheck's and
            # the final tree's model jobs) add up.
            now = time.monotonic()
            self.phase_s[self.phase] = self.phase_s.get(self.phase, 0.0) + now - self.last
            self.last = now
        self.counts["rewrites"] = self.counts.get("rewrites", 0) + rewrites
        for verdict in verdicts:
            self.counts[verdict] = self.counts.get(verdict, 0) + 1
        self._tell()

    def _tell(self) -> None:
        if self.callback is not None and self.total:
            self.callback(Progress(self.phase, self.done, self.total,
                                   self.counts.get("rewrites", 0),
                                   {k: v for k, v in self.counts.items() if k != "rewrites"},
                                   self.target))
