"""The observe phase's records: the types the configured models' eager runs saw in each file,
and why a model gave none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases.records import File, Observed

if TYPE_CHECKING:

    pass


def observed_files(todo: list[File], models: list[configured.Configured],
                   observations: configured.Observations) -> dict[int, Observed]:
    """Each file's types from the models' runs, and why a model gave none."""
    observed: dict[int, Observed] = {}
    for file in todo:
        types = observations.types.get(str(file.resolved), {})
        notes: list[str] = []
        timed_out = None
        for model in models:
            result = observations.results.get(model.display)
            if model.file.index != file.index or result is None or result.failure is None:
                continue
            notes.append(f"no observed types for {model.name} (static inference only): "
                         f"{result.failure}")
            if "timed out" in result.failure:
                timed_out = result.failure
        if types or notes:
            observed[file.index] = Observed(types, tuple(notes), timed_out)
    return observed
