"""A run of ``tsfix apply``: discover sources, rewrite, format touched lines, cache, report,
write. ``engine.run`` is the entry point; nothing here imports torch.
"""
