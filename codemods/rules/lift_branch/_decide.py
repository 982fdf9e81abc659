"""Decisions and refusals: :class:`Decisions` says, for each setting a compiled test reads,
the type it may be lifted as, or why it may not (and whether it is configuration at all)."""

from __future__ import annotations

from tsfix.codemods.facts.syntax import SCALAR_TYPES, self_name, short_source, unify_types
from tsfix.codemods.rules.lift_branch._reads import ReadKey, Reads, describe, sources
from tsfix.codemods.rules.lift_branch._setup import ClassSetup
from tsfix.codemods.rules.lift_branch._usage import string_codes, usage_of
from tsfix.codemods.rules.lift_branch._values import value_kind


class Decisions:
    """Decides, for one nn.Module class, what may be lifted and why the rest may not."""

    def __init__(self, setup: ClassSetup, reads: Reads) -> None:
        self.setup = setup
        self.reads = reads

    def classify(self, key: ReadKey, reachable: list[str]) -> tuple[str | None, str, bool]:
        """(type, "", True) when ``key`` may be lifted, else (None, reason, configuration):
        ``configuration`` says whether the value is a setting (an export blocker, TSF204, left
        for the reason) or not configuration at all (``self.training``, a submodule...)."""
        if key[0] == "cfg":
            return (*self._classify_config_field(key, reachable), True)
        attr = key[1]
        if attr == "training":
            return None, "self.training is set by train()/eval(), not configuration", False
        if attr in self.setup.methods:
            return None, f"self.{attr} is a method or property", False
        if attr in self.setup.registered:
            return None, f"self.{attr} is a registered buffer, parameter or submodule", False
        if attr in self.setup.constants:
            return (None, f"self.{attr} is a TorchScript constant (__constants__ or Final): "
                    "TorchScript compiles only the branch it takes per instance; lifted into an "
                    "argument the test would be undecided again", True)
        other = self.setup.assigned_outside_init(attr)
        if other is not None:
            return (None, f"self.{attr} is also assigned in {other}() (state, not "
                    "configuration)", True)
        assignments = self.setup.init_assignments(attr)
        if not assignments:
            return None, f"self.{attr} is not assigned in {self.setup.name}.__init__", False
        if attr in self.setup.facts.function_attrs:
            return None, f"self.{attr} holds a function, not configuration", False
        declared = self.setup.declared_as_object(attr)
        if declared is not None:
            return None, f"self.{attr} is declared {declared}, not configuration", False
        kinds = [value_kind(self.setup, a.value) for a in assignments]
        for kind, detail in kinds:
            if kind in ("tensor", "module"):
                return None, f"self.{attr} {detail}", False
        read = self.setup.object_reads.get(attr)
        if read is not None and any(kind not in SCALAR_TYPES for kind, _ in kinds):
            return None, (f"self.{attr} is an object whose fields are read "
                          f"(`{short_source(read)}`), not a setting"), True
        types: list[str] = []
        for a, (kind, detail) in zip(assignments, kinds, strict=True):
            if kind not in SCALAR_TYPES and kind != "scalar":
                # A value of unknown type is not shown to be a setting.
                return None, f"self.{attr} {detail}", kind != "computed"
            # Sorted: the reason names one line, the same on every run.
            for source in sorted(sources(a.value) | {f"self.{attr}"}):
                if source in self.setup.structural:
                    return None, self._structural_reason(f"self.{attr}", source), True
            if kind in SCALAR_TYPES:
                types.append(kind)
        return (*self._settle_type(key, types, len(types) < len(assignments), reachable), True)

    def _classify_config_field(self, key: ReadKey,
                               reachable: list[str]) -> tuple[str | None, str]:
        holder, path = key[1], ".".join(key[2:])
        sources = {f"self.{holder}.{path}"} | {f"{alias}.{path}" for alias in
                                               self.setup.aliases(holder)}
        for source in sorted(sources):
            if source in self.setup.structural:
                return None, self._structural_reason(describe(key), source)
        declared = self.setup.holder_field_types(holder).get(key[2]) if len(key) == 3 else None
        return self._settle_type(key, [declared] if declared else [], not declared, reachable)

    def _structural_reason(self, described: str, source: str) -> str:
        region = self.setup.structural[source]
        line = self.setup.rule.line_of(region)
        where = self.setup.elsewhere.get(id(region))
        if where is None:
            return (f"{described} decides which submodules __init__ builds (line {line}); both "
                    "branches must compile")
        return (f"{described} is passed to {where} in __init__ (line {line}): the submodule "
                "keeps the value it was built with, which a lifted argument would not change")

    def _settle_type(self, key: ReadKey, known: list[str], has_unknown: bool,
                     reachable: list[str]) -> tuple[str | None, str]:
        """The one type that serves the values ``__init__`` gives (``known``; ``has_unknown``:
        some are of unknown type) and every use in the compiled methods, or None and why."""
        described = describe(key)
        usage = usage_of(self.reads, key, reachable)
        if usage.none:
            return None, (f"{described} is compared with None: an optional setting, which "
                          "a lifted argument (None: not given) cannot pass")
        guess = usage.guess()
        if guess == "":
            return None, f"{described} is compared with values of different types"
        if known:
            observed = [guess] if has_unknown and guess not in (None, "bool") else []
            kind = unify_types(known + observed)
            if kind is None:
                return None, f"{described} is given values of different types"
        elif guess is None:
            site = usage.needs["number"]
            return None, (f"{described} is used as a number (`{short_source(site)}`) but __init__ "
                          "gives it no default, literal or annotation, so whether it is an int "
                          "or a float is unknown (a lifted argument must have its exact type); "
                          "annotate the constructor parameter")
        else:
            kind = guess
        return (None, usage.unserved(described, kind)) if usage.unserved(described, kind) \
            else (kind, "")

    def verdict(self, key: ReadKey, uncopyable: dict[str, str]
                 ) -> tuple[str | None, str, bool, dict[str, int] | None]:
        """(type, reason, configuration, str codes) for one read key, by :meth:`classify` and
        what else forbids the lift: a holder whose fields cannot be copied, a method run in
        Python that reads the setting, a str setting under --target onnx."""
        if key[0] == "cfg" and key[1] in uncopyable:
            return None, uncopyable[key[1]], True, None
        kind, reason, configuration = self.classify(key, self.setup.compiled)
        if kind is None:
            return kind, reason, configuration, None
        methods = self.setup.methods
        readers = [name for name in self.setup.python_run
                   if key in self.reads.reads_in(methods[name].body,
                                                 self_name(methods[name]) or "self")]
        if readers:
            return None, (f"{describe(key)} is also read in {readers[0]}(), which runs in "
                          "Python (a @torch.jit.ignore method or one it calls): it would not "
                          "see the lifted argument"), True, None
        codes = None
        if kind == "str" and self.setup.target in ("onnx", "export"):
            codes = string_codes(self.reads, key, self.setup.compiled)
            if codes is None:
                taker = "an ONNX graph" if self.setup.target == "onnx" else "torch.export"
                return None, (f"{describe(key)} is a str setting used other than compared "
                              f"with string literals (== / !=): {taker} cannot take a "
                              "str input, and int codes need every compared value"), True, None
        return kind, "", True, codes

    def uncopyable_holders(self) -> dict[str, str]:
        """Config holders whose fields cannot be copied after them in ``__init__`` -> why."""
        top_level = self.setup.top_level()
        found: dict[str, str] = {}
        for holder in sorted(self.setup.config_holders):
            statements = [a.statement for a in self.setup.init_assignments(holder)]
            if not statements or not all(id(s) in top_level for s in statements):
                found[holder] = (f"self.{holder} is assigned inside a block of __init__; its "
                                 "fields are not copied")
        return found
