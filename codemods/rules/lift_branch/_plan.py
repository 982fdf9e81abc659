"""The plan: which settings are lifted as which parameters of which methods
(:class:`Lift`), which config fields are copied to plain attributes (:class:`ConfigCopy`),
and :class:`ClassAnalysis`, which makes it for one class and reports every site."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from tsfix.codemods.facts.syntax import fresh_name, names_used, self_attr, self_name, short_source
from tsfix.codemods.rules.base import Rule
from tsfix.codemods.rules.lift_branch._callees import Callees
from tsfix.codemods.rules.lift_branch._decide import Decisions
from tsfix.codemods.rules.lift_branch._reads import (
    ReadKey,
    Reads,
    access,
    describe,
    identifier,
    methods_called,
)
from tsfix.codemods.rules.lift_branch._setup import ClassSetup

TSF203 = "TSF203"
TSF204 = "TSF204"


@dataclass
class Lift:
    key: ReadKey
    attr: str              # plain attribute the parameter defaults to
    type: str
    param: str = ""
    methods: set[str] = field(default_factory=set)   # methods that receive the parameter
    # --target onnx: the local holding the setting's value, and for a str setting the int code
    # of each string it is compared with (any other string is -1).
    local: str = ""
    codes: dict[str, int] | None = None


@dataclass
class ConfigCopy:
    key: ReadKey
    attr: str              # new plain attribute in __init__
    access: str            # how the read reaches the field from the holder: .x, ["x"], .a.b


@dataclass
class Plan:
    lifts: list[Lift]
    copies: list[ConfigCopy]
    copy_after: dict[str, int]   # config holder -> index of the __init__ statement to follow
    reachable: list[str]


class ClassAnalysis:
    """What to lift and copy in one nn.Module class: the facts of its ``__init__``
    (:class:`ClassSetup`), its reads (:class:`Reads`) and the decisions on them
    (:class:`Decisions`), made into a :class:`Plan`."""

    def __init__(self, rule: Rule, cls: cst.ClassDef, callees: Callees, target: str) -> None:
        self.rule = rule
        self.setup = ClassSetup(rule, cls, callees, target)
        self.reads = Reads(self.setup)
        self.decisions = Decisions(self.setup, self.reads)
        self.name = self.setup.name
        self.methods = self.setup.methods
        self.compiled = self.setup.compiled
        # The sites the plan fixes: (node, code, message), reported when it is applied.
        self.fixes: list[tuple[cst.CSTNode, str, str]] = []

    def plan(self) -> Plan | None:
        """What to lift and copy. Every site is reported: a refusal at once (``rule.skip``), a
        fix in :attr:`fixes`, which the rule reports when it applies the plan."""
        compiled = self.compiled
        if not compiled:
            return None
        uncopyable = self.decisions.uncopyable_holders()
        lifts: dict[ReadKey, Lift] = {}
        verdicts: dict[ReadKey, tuple[str | None, str, bool, dict[str, int] | None]] = {}
        for method_name in compiled:
            for key, node in self.reads.test_reads(method_name):
                if key not in verdicts:
                    verdicts[key] = self.decisions.verdict(key, uncopyable)
                kind, reason, configuration, codes = verdicts[key]
                message = (f"branch on configuration attribute '{describe(key)}' (an exported "
                           "model keeps only the branch chosen at construction)")
                if kind is not None:
                    lifts.setdefault(key, Lift(key, key[1] if key[0] == "attr" else "", kind,
                                               codes=codes))
                    self.fixes.append((node, TSF204, message))
                elif configuration:
                    self.rule.skip(self.name, node, reason, code=TSF204, message=message)
                elif not any(s.reason == reason for s in self.rule.skips):
                    self.rule.skip(self.name, node, reason)
        # Config fields read anywhere in compiled code are copied out of the holder.
        copies: dict[ReadKey, ConfigCopy] = {}
        taken_attrs = {a.attr for a in self.setup.assignments} | set(self.methods) | {
            key[1] for name in self.methods
            for key in self.reads.reads_in(self.methods[name].body,
                                           self_name(self.methods[name]) or "self")
            if key[0] == "attr"}
        for method_name in compiled:
            func = self.methods[method_name]
            for key, node in self.reads.reads_in(func.body, self_name(func) or "self").items():
                if key[0] == "cfg" and key not in copies and key[1] not in uncopyable:
                    leaf = identifier(key[-1])
                    attr = fresh_name(leaf.lstrip("_") or leaf,
                                      "_".join(identifier(k) for k in key[1:]), taken=taken_attrs)
                    taken_attrs.add(attr)
                    copies[key] = ConfigCopy(key, attr, access(node, len(key) - 2))
        for key, lift in lifts.items():
            if key[0] == "cfg":
                lift.attr = copies[key].attr
        self._report_config_reads(copies, uncopyable)
        if not lifts and not copies:
            return None
        copy_after = {holder: max(self.setup.top_level()[id(a.statement)]
                                  for a in self.setup.init_assignments(holder))
                      for holder in {k[1] for k in copies}}
        self._thread(list(lifts.values()), compiled)
        return Plan(list(lifts.values()), list(copies.values()), copy_after, compiled)

    def _report_config_reads(self, copies: dict[ReadKey, ConfigCopy],
                             uncopyable: dict[str, str]) -> None:
        """TSF203: every read of a config object's field in compiled code, fixed when it is
        copied to a plain attribute, else refused with the reason."""
        for method_name in self.compiled:
            func = self.methods[method_name]
            self_var = self_name(func) or "self"
            never = self.setup.facts.never_compiled(method_name)
            accesses, keys, called, interior = self.reads.scan(func.body, self_var)
            for node in accesses:
                assert isinstance(node, cst.Attribute | cst.Subscript)
                if id(node) in never or id(node) in interior or not self.reads.config_rooted(
                        node.value, keys.get(id(node.value)), self_var):
                    continue
                key, inner = keys[id(node)], keys.get(id(node.value))
                # The holder the chain starts at (a computed key has no read key of its own).
                holder = (key or inner or ("", self_attr(node.value, self_var) or ""))[1]
                message = f"{short_source(node)} reads a field of config object 'self.{holder}'"
                if id(node) in called:
                    reason = (f"{short_source(node)}(...) calls a method of the config object; "
                              "only fields read as values are copied")
                elif holder in uncopyable:
                    reason = uncopyable[holder]
                elif key is None or key not in copies:
                    reason = ("the field is not named by a string literal; only fields read "
                              "by name are copied")
                else:
                    self.fixes.append((node, TSF203, message))
                    continue
                self.rule.skip(self.name, node, reason, code=TSF203, message=message)

    def _thread(self, lifts: list[Lift], reachable: list[str]) -> None:
        """Which compiled methods need each parameter (they read it, or call one that does),
        and a parameter name free in all of them."""
        calls = {name: {c for c in methods_called(self.methods[name]) if c in reachable}
                 for name in reachable}
        taken: set[str] = set()
        for lift in lifts:
            needing = {name for name in reachable
                       if lift.key in self.reads.reads_in(
                           self.methods[name].body, self_name(self.methods[name]) or "self")}
            changed = True
            while changed:
                changed = False
                for name in reachable:
                    if name not in needing and calls[name] & needing:
                        needing.add(name)
                        changed = True
            lift.methods = needing
            for name in needing:
                taken |= names_used(self.methods[name])
        chosen: set[str] = set()
        for lift in lifts:
            base = lift.attr.lstrip("_") or lift.attr
            lift.param = fresh_name(base, f"{base}_value", taken=taken | chosen)
            chosen.add(lift.param)
        if self.setup.target == "onnx":
            for lift in lifts:
                lift.local = fresh_name(f"{lift.param}_value", f"{lift.param}_setting",
                                        taken=taken | chosen)
                chosen.add(lift.local)
