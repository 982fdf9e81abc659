"""``tsfix check`` (export blockers, without rewriting) and ``tsfix explain`` (rule docs, and
why a class does not script)."""
