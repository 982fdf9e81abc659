"""tsfix's command line (:mod:`tsfix.cli.main`).

Started as the program (the ``tsfix`` script, or ``python -m tsfix.cli...``), a Ctrl-C that
comes while Python is still importing the command line is the same one message and exit 130
as later on, not a traceback from inside an import; the command restores Python's own
handler as it starts (:class:`tsfix.cli.main._Group`). Imported by anything else (tests, an
application), nothing here touches signal handling.
"""

from __future__ import annotations

import os
import signal
import sys

STOPPED_BEFORE_WRITING = ("interrupted: stopped before anything was written; every file is as "
                          "it was")


def _stopped_while_starting(signum: int, frame: object) -> None:
    # Nothing has started that needs cleaning up, and an exception raised here, in the middle
    # of some import, can come out as another (RuntimeError from a class's __set_name__).
    os.write(2, STOPPED_BEFORE_WRITING.encode() + b"\n")
    os._exit(130)


def _is_the_program() -> bool:
    # The script's argv[0] is its path; under `python -m tsfix.cli.main` it is "-m" while
    # the parent packages are imported.
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    return name == "-m" or name.startswith("tsfix")


# Started as the program: Ctrl-C may end the process with os._exit (tsfix.cli.main).
PROGRAM = _is_the_program()
if PROGRAM and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _stopped_while_starting)
