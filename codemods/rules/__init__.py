"""The rules: one module (or package) per rule, named after it (``lift-branch`` is
``lift_branch/``).

``base.py`` holds the contract every rule follows, ``registry.py`` finds the rules and orders
them, ``imports.py`` adds the imports a rewrite needs. Nothing here imports torch.
"""
