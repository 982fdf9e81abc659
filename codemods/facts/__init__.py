"""What every rule and the linter read about a file, computed once per file.

Module facts (imports, module classes, numpy bindings) and class facts (the methods TorchScript
compiles, ``__init__`` attributes, parameter types) live here; rules ask for them, they never
recompute them. Nothing here imports torch.
"""
