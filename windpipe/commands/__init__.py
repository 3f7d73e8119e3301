"""The ``windpipe`` command's subcommands, one module each (:mod:`windpipe.cli` parses).

``common`` holds what they share (the server flags, ``Settings`` from them, ``CliError``);
``serve`` runs the servers and ``migrate``; ``token`` manages API tokens; ``data`` writes
and copies datasets (``synth``, ``upload``, ``ingest``) and runs the ``demo``; ``bench``
hands over to the benchmarks. Each command imports what it runs when it runs, so
``windpipe --help`` stays fast: with :mod:`windpipe.cli`, this package is where
first-party imports sit inside functions.
"""

from __future__ import annotations

__all__: list[str] = []
