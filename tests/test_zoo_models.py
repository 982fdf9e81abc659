"""Whole real models, as a user runs tsfix on them: the pinned zoo (``tests/zoo.py``), one example
table per model, ``--rule all`` over the MODEL files only (the blocks, base classes and helpers
they import are found by the models' runs and the fix loop).

What is asserted is what was measured on torch 2.13 (issue 16): DeepSpeech, SuDORMRFNet and
DPRNNTasNet do not script before tsfix and script after it, end to end, with the original's
outputs and save/load; the fix loop rewrites the asteroid files they import (the partial-range
ModuleList index, the name-mangled ``sample_rate`` property, ``flatten_parameters``); models that
scripted before still do; the three that still stop name a line of the tree and what ``tsfix
explain`` says about it.

The registry must be reachable (``tests/zoo.py`` downloads pinned wheels once). Offline, set
``TSFIX_SKIP_CORPUS=1`` to skip it; CI never sets it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import zoo
from corpus import CorpusUnavailable
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.report import REJECTED, UNVERIFIED, VERIFIED

pytestmark = pytest.mark.slow

SCRIPT_AFTER_TSFIX = {"torchaudio/models/deepspeech.py:DeepSpeech",
                      "asteroid/models/sudormrf.py:SuDORMRFNet",
                      "asteroid/models/dprnn_tasnet.py:DPRNNTasNet",
                      "asteroid/models/conv_tasnet.py:ConvTasNet",
                      "speechbrain/lobes/models/ECAPA_TDNN.py:ECAPA_TDNN",
                      "torchaudio/models/_hdemucs.py:HDemucs",
                      "speechbrain/nnet/RNN.py:LSTM"}
SCRIPTED_BEFORE = {"torchaudio/models/conv_tasnet.py:ConvTasNet",
                   "torchaudio/models/wav2letter.py:Wav2Letter",
                   "speechbrain/lobes/models/CRDNN.py:CRDNN"}
STILL_BLOCKED = {"speechbrain/lobes/models/Xvector.py:Xvector"}


@pytest.fixture(scope="module")
def site() -> Path:
    if os.environ.get("TSFIX_SKIP_CORPUS") == "1":
        if os.environ.get("CI"):
            pytest.fail("TSFIX_SKIP_CORPUS=1 is set in CI: the zoo test must run there")
        pytest.skip("TSFIX_SKIP_CORPUS=1: the model zoo is not checked")
    try:
        return zoo.install()
    except CorpusUnavailable as exc:
        problem = str(exc)
    pytest.fail(problem, pytrace=False)


def test_zoo_models_script_after_tsfix(site: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    models = zoo.DEVELOPMENT_TARGETS + zoo.OTHER_MODELS
    project = zoo.make_project(tmp_path / "zoo", ["asteroid", "torchaudio", "speechbrain"],
                               models, site=site)
    monkeypatch.chdir(project.root)
    monkeypatch.setenv("PYTHONPATH", project.env({})["PYTHONPATH"])

    result = run([Path(m.path) for m in models], Options(rules=["all"], jobs=2))

    verdicts = {m.model: m for m in result.models()}
    assert set(verdicts) == {m.key for m in models}
    for key in SCRIPT_AFTER_TSFIX:
        assert verdicts[key].ok and verdicts[key].scripted_before is False, verdicts[key]
        assert "parity with the original" in verdicts[key].reason
        assert "save/load" in verdicts[key].reason
    for key in SCRIPTED_BEFORE:
        assert verdicts[key].ok and verdicts[key].scripted_before is True, verdicts[key]
    for key in STILL_BLOCKED:
        record = verdicts[key]
        assert record.status == "fails", record
        if record.blocker is None:
            # TorchScript names no line for some errors (ECAPA's unannotated `lengths=None`:
            # "Unsupported value kind: Tensor"); its message is the record's reason.
            assert record.reason, record
            continue
        assert ":" in record.blocker, record
        path, _, line = record.blocker.rpartition(":")
        assert (project.root / path).is_file() and int(line) > 0
        assert record.explain, record
    # The files the fix loop rewrote: imported by the models, not among the paths given.
    loop = {f.display for f in result.files if f.fix_loop}
    assert {"asteroid/masknn/convolutional.py", "asteroid/models/base_models.py",
            "asteroid/masknn/recurrent.py", "speechbrain/dataio/dataio.py"} <= loop, loop
    # ECAPA's pooling calls speechbrain's length_to_mask (dataio.py): the loop annotated it.
    ecapa = verdicts["speechbrain/lobes/models/ECAPA_TDNN.py:ECAPA_TDNN"]
    assert any("length_to_mask()" in line and "annotate" in line for line in ecapa.rounds), (
        ecapa.rounds)
    assert "dataio.py" not in (ecapa.blocker or ""), ecapa
    assert all(f.written for f in result.files if f.fix_loop)

    # The rewritten classes the models reach get their verdicts from the models' runs: no
    # "no example inputs", no guessed input.
    # Every verdict says why: a class the fix loop rewrote that no model reaches too.
    assert all(c.reason for c in result.classes()), [
        c.class_name for c in result.classes() if not c.reason]
    reached = [c for c in result.classes() if "from model" in c.reason]
    decided = [c for c in reached if c.verdict in (VERIFIED, REJECTED)]
    # The LSTM model's file (speechbrain/nnet/RNN.py, a path of the run) also holds cells no
    # model reaches: only those go without a model's verdict.
    unreached = {(f.display, c.class_name) for f in result.files for c in f.classes
                 if c.verdict == UNVERIFIED
                 and ("no example inputs" in c.reason or "could not infer" in c.reason)}
    assert {path for path, _ in unreached} <= {"speechbrain/nnet/RNN.py"}, unreached
    assert ("speechbrain/nnet/RNN.py", "LSTM") not in unreached
    assert len(reached) >= 6
    # The others stay unverified for a measured reason: the class does not script before or
    # after its rewrite (the models stop further on).
    undecided = [(c.class_name, c.reason) for c in reached if c not in decided]
    assert all("does not script before or after" in reason for _, reason in undecided), undecided
    # 8 of 11 measured: ECAPA's three rewritten classes (typeerror-fallback, nested-function +
    # annotate, none-module-test) wait for the model to script.
    assert len(decided) >= 0.7 * len(reached), [(c.class_name, c.reason) for c in reached]
