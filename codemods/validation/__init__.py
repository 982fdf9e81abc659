"""Validation: the worker pool, the jobs it runs and the verdicts it returns.

``worker.py`` is the only module of tsfix that imports torch, and it runs in worker processes.
"""
