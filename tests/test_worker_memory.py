"""A validation worker that has grown too much is replaced after its job, so a long run's memory
does not grow with it (TorchScript keeps every type it compiled, and with them the user's
classes). Real workers, hence ``slow``."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from tsfix.codemods.pipeline.config import parse_example
from tsfix.codemods.validation import pool
from tsfix.codemods.validation.pool import JobClass, ValidationJob, resident_mb, run_jobs

# Each forward call writes the pid of the worker that runs it.
PID_MODEL = textwrap.dedent("""\
    import os

    import torch.nn as nn


    class Net(nn.Module):
        def forward(self, x):
            with open({log!r}, "a") as log:
                log.write(f"{{os.getpid()}}\\n")
            return x * 2
""")


def _pids_serving(tmp_path: Path, jobs: int) -> set[str]:
    """The worker processes that ran ``jobs`` jobs in a pool of one worker."""
    tmp_path.mkdir()
    log = tmp_path / "pids.txt"
    path = tmp_path / "model.py"
    path.write_text(PID_MODEL.format(log=str(log)))
    example = parse_example("model.py:Net", {"inputs": ["randn(2)"]}).to_example()
    run_jobs([ValidationJob(i, str(path), path.read_text(), (JobClass("Net", example),))
              for i in range(jobs)], workers=1, timeout=120)
    return set(log.read_text().split())


def test_resident_memory_is_read() -> None:
    size = resident_mb(os.getpid())
    assert size is not None and size > 1


@pytest.mark.slow
def test_a_worker_is_kept_until_it_grows_past_the_cap(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(_pids_serving(tmp_path / "kept", 3)) == 1
    monkeypatch.setattr(pool, "MAX_GROWTH_MB", -1.0)      # every worker has "grown"
    assert len(_pids_serving(tmp_path / "replaced", 3)) == 3
