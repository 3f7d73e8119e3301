"""The ``windpipe`` command.

``serve`` runs the catalog REST API and a Flight server in one process on the
embedded defaults; ``serve catalog`` / ``serve flight`` run one each (what
docker-compose uses); ``migrate`` upgrades a database; ``token create|list|revoke``
manages API tokens in the catalog database; ``synth`` writes demo data; ``upload``
copies a dataset folder into the object store; ``ingest`` turns
cycler exports into segments and a manifest;
``demo`` runs the whole path end to end; ``ui`` serves the catalog's web pages over an
embedded catalog; ``bench`` runs the benchmarks.

The CLI is the top layer (``docs/architecture.md``): it may import every package.
This module builds the parser and dispatches; each command lives in
:mod:`windpipe.commands` and imports what it runs when it runs (torch, FastAPI and
Flight are slow to import), so ``windpipe --help`` stays fast: this module and that
package are the one place where first-party imports sit inside functions.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from windpipe.commands.bench import bench
from windpipe.commands.common import CliError, add_server_flags, settings_from
from windpipe.commands.data import CyclerChoices, demo, ingest, synth, upload
from windpipe.commands.serve import migrate, serve
from windpipe.commands.token import duration, token
from windpipe.commands.ui import ui
from windpipe.services.runtime import prefer_small_pages

__all__ = ["CliError", "build_parser", "main"]

_settings = settings_from  # the server flags of parsed arguments as Settings


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed so tests can check the CLI surface)."""
    parser = argparse.ArgumentParser(prog="windpipe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the catalog and a Flight server")
    serve.add_argument(
        "service", nargs="?", choices=("all", "catalog", "flight"), default="all",
        help="which service to run (default: both in one process)",
    )
    add_server_flags(serve)

    migrate = sub.add_parser("migrate", help="upgrade a database to the latest schema")
    add_server_flags(migrate, "database_url", "data_dir")
    migrate.add_argument("--revision", default="head",
                         help="alembic revision to upgrade to (default head)")

    token = sub.add_parser("token", help="create, list or revoke API tokens")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="mint a token (its text is printed once)")
    create.add_argument("--name", required=True, help="the token's unique name (required)")
    create.add_argument("--role", required=True, choices=("reader", "writer", "admin"),
                        help="what it may do: reader, writer or admin (required)")
    create.add_argument("--datasets", help="glob of the dataset names it may touch, e.g. "
                                           "'lab-*' (default: every dataset)")
    create.add_argument("--expires-in", type=duration, default=None, metavar="DURATION",
                        help="refuse the token after this long: seconds, or a number with "
                             "s, m, h or d (90d, 12h; default: never)")
    create.add_argument("--create", action="store_true",
                        help="make a new catalog database when none exists at --data-dir / "
                             "--database-url (default: refuse, naming where it looked)")
    listing = token_sub.add_parser("list", help="every token (never its text)")
    revoke = token_sub.add_parser("revoke", help="revoke a token by name")
    revoke.add_argument("name")
    for command in (create, listing, revoke):
        add_server_flags(command, "database_url", "data_dir")

    synth = sub.add_parser("synth", help="write a synthetic battery dataset")
    synth.add_argument("directory", type=Path, help="where to write segments and manifest")
    synth.add_argument("--cells", type=int, default=4, help="battery cells (default %(default)s)")
    synth.add_argument("--cycles", type=int, default=6,
                       help="cycles per cell (default %(default)s)")
    synth.add_argument("--rows-per-cycle", type=int, default=600,
                       help="cycling rows per cycle (default %(default)s)")
    synth.add_argument("--seed", type=int, default=0, help="random seed (default %(default)s)")
    synth.add_argument("--zarr-fraction", type=float, default=0.25,
                       help="share of segments written as zarr v3, the rest parquet "
                            "(default %(default)s)")
    synth.add_argument("--hppc-every", type=int, default=5,
                       help="an hppc test on every k-th cycle (default %(default)s)")
    synth.add_argument("--eis-every", type=int, default=2,
                       help="an eis spectrum on every k-th cycle (default %(default)s)")
    synth.add_argument("--missing-channel", default=None,
                       help="a column the last --missing-cells cells have no sensor for "
                            "(default: none)")
    synth.add_argument("--missing-cells", type=int, default=0,
                       help="how many cells lack --missing-channel (default %(default)s)")
    synth.add_argument("--missed-tests", type=float, default=0.0,
                       help="probability that a scheduled hppc or eis test is left out, so "
                            "they cover an irregular set of cycles (default %(default)s)")

    upload = sub.add_parser("upload", help="copy a local dataset folder into the object store "
                                           "(WINDPIPE_S3_* say how to reach it)")
    upload.add_argument("directory", type=Path, help="the folder to copy (segments, manifest)")
    upload.add_argument("destination", help="s3://bucket/prefix (or an existing absolute "
                                            "folder) the files go under, paths kept")

    ingest = sub.add_parser("ingest", help="cycler exports to segments and a manifest "
                                           "(windpipe[ingest]; docs/data.md)")
    ingest.add_argument("inputs", nargs="+", type=Path, metavar="INPUT",
                        help="export files, or folders holding them")
    ingest.add_argument("--out", required=True, type=Path, help="where segments/, "
                        "manifest.parquet and ingest.json go (required, no default)")
    ingest.add_argument("--cycler", default="auto", choices=CyclerChoices(), metavar="CYCLER",
                        help="who wrote the files: %(choices)s (default %(default)s: name "
                             "and header say)")
    ingest.add_argument("--set-id", help="every row's set_id (default: --out's name)")
    ingest.add_argument("--protocol", default="cycling",
                        help="the time series' protocol, spectra are eis (default %(default)s)")
    ingest.add_argument("--cell-pattern", metavar="REGEX", help="its group 'cell' (or first "
                        "group) in a file's name is the cell (default: the name sans suffix)")
    ingest.add_argument("--overwrite", action="store_true", help="replace an earlier ingest's "
                        "output (default: refuse an --out that is not empty)")
    ingest.add_argument("--on-bad-file", choices=("stop", "skip"), default="stop",
                        help="a file that cannot be ingested: stop (write nothing, name it) or "
                             "skip it and ingest the rest, listing each skipped file and why "
                             "(default %(default)s)")

    pages = sub.add_parser("ui", help="the catalog's read-only web pages over an embedded "
                                      "catalog, on 127.0.0.1 (docs/ui.md)")
    pages.add_argument("directory", type=Path, help="the catalog's data_dir (holding "
                                                     "catalog.db)")
    pages.add_argument("--port", type=int, default=8765,
                       help="port on 127.0.0.1 (default %(default)s; 0: any free port)")

    demo = sub.add_parser("demo", help="synthesize, serve, register, split, plan and stream")
    demo.add_argument("--data-dir", type=Path, help="where to put state (default: a temp dir)")
    demo.add_argument("--rows-per-cycle", type=int, default=20000,
                      help="cycling rows per cycle of the synthetic dataset "
                           "(default %(default)s)")
    demo.add_argument("--device", default="auto",
                      help="where batches go: auto (CUDA when present), cpu, cuda:N "
                           "(default %(default)s)")

    sub.add_parser("bench", add_help=False,
                   help="run the benchmarks: every option goes to `python -m bench` "
                        "(--quick, --json PATH, --only ...; see docs/benchmarks.md)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``windpipe`` console script (every server starts here, so it
    sets Arrow's allocator option first: nothing has loaded pyarrow yet)."""
    prefer_small_pages()
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["bench"]:  # every option belongs to the benchmark's own parser
        return bench(given[1:])
    args = build_parser().parse_args(given)
    handlers = {"serve": serve, "migrate": migrate, "token": token, "synth": synth,
                "upload": upload, "ingest": ingest, "demo": demo, "ui": ui}
    try:
        return handlers[args.command](args)
    except CliError as exc:
        print(f"windpipe {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
