"""Validation: the worker pool, the jobs it runs and the verdicts it returns.

``worker.py`` is the only module of tsfix that imports torch, and it runs in worker processes;
``protocol.py`` holds what the pool and a worker say to each other. The verdict names live here,
so that reading a report or a cached outcome does not load the protocol's records.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

VerdictName: TypeAlias = Literal["verified", "rejected", "unverified"]
VERIFIED: VerdictName = "verified"
REJECTED: VerdictName = "rejected"
UNVERIFIED: VerdictName = "unverified"
VERDICTS: tuple[VerdictName, ...] = (VERIFIED, REJECTED, UNVERIFIED)


def verdict_name(value: object) -> VerdictName:
    """``value`` as a verdict name; raises ValueError for anything else."""
    for name in VERDICTS:
        if value == name:
            return name
    raise ValueError(f"not a verdict: {value!r}")

