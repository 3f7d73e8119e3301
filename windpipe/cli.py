"""The ``windpipe`` command.

``serve`` runs the catalog REST API and a Flight server in one process on the
embedded defaults; ``serve catalog`` / ``serve flight`` run one each (what
docker-compose uses); ``migrate`` upgrades a database; ``token create|list|revoke``
manages API tokens in the catalog database; ``synth`` writes demo data; ``upload``
copies a dataset folder into the object store; ``ingest`` turns
cycler exports into segments and a manifest;
``demo`` runs the whole path end to end; ``bench`` runs the benchmarks.

The CLI is the top layer (``docs/architecture.md``): it may import every package.
Each command imports what it runs when it runs (torch, FastAPI and Flight are slow
to import), so ``windpipe --help`` stays fast; this module is the one place where
first-party imports sit inside functions.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from services.settings import SettingInfo, Settings, setting_infos

__all__ = ["CliError", "build_parser", "main"]


# the server flags, from the fields of services.settings that name one (help text and
# default included); argparse's default stays None so that a flag given overrides the
# WINDPIPE_* variable, which overrides the field's default
_SERVER_FLAGS: tuple[SettingInfo, ...] = tuple(i for i in setting_infos() if i.flag)
_BY_NAME = {info.name: info for info in setting_infos()}
_CYCLERS = ("arbin", "maccor", "batterydata", "biologic")  # services.ingest.CYCLERS


def _add_setting_flag(parser: argparse.ArgumentParser, info: SettingInfo) -> None:
    """One flag of a setting: its help is the field's description and default."""
    assert info.flag is not None
    text = f"{info.description} (default {info.default})".replace("%", "%%")
    options: dict[str, Any] = {"dest": info.name, "default": None, "help": text}
    if info.kind is bool:  # --insecure; --[no-]auto-blocks when on by default
        options["action"] = argparse.BooleanOptionalAction if info.negatable else "store_true"
    elif info.choices:
        options["choices"] = info.choices
    else:
        options["metavar"] = info.flag.removeprefix("--").upper().replace("-", "_")
        if info.kind is tuple:  # --allow-root, --flight-location: once per value
            options["action"] = "append"
        elif info.kind in (int, float, Path):
            options["type"] = info.kind
    parser.add_argument(info.flag, **options)


def _add_server_flags(parser: argparse.ArgumentParser, *names: str) -> None:
    """The flags of settings ``names``, or every server flag when none are named."""
    for info in (_SERVER_FLAGS if not names else tuple(_BY_NAME[n] for n in names)):
        _add_setting_flag(parser, info)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed so tests can check the CLI surface)."""
    parser = argparse.ArgumentParser(prog="windpipe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the catalog and a Flight server")
    serve.add_argument(
        "service", nargs="?", choices=("all", "catalog", "flight"), default="all",
        help="which service to run (default: both in one process)",
    )
    _add_server_flags(serve)

    migrate = sub.add_parser("migrate", help="upgrade a database to the latest schema")
    _add_server_flags(migrate, "database_url", "data_dir")
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
    create.add_argument("--expires-in", type=_duration, default=None, metavar="DURATION",
                        help="refuse the token after this long: seconds, or a number with "
                             "s, m, h or d (90d, 12h; default: never)")
    create.add_argument("--create", action="store_true",
                        help="make a new catalog database when none exists at --data-dir / "
                             "--database-url (default: refuse, naming where it looked)")
    listing = token_sub.add_parser("list", help="every token (never its text)")
    revoke = token_sub.add_parser("revoke", help="revoke a token by name")
    revoke.add_argument("name")
    for command in (create, listing, revoke):
        _add_server_flags(command, "database_url", "data_dir")

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
    ingest.add_argument("--cycler", default="auto", choices=("auto", *_CYCLERS),
                        help="who wrote the files (default %(default)s: name and header say)")
    ingest.add_argument("--set-id", help="every row's set_id (default: --out's name)")
    ingest.add_argument("--protocol", default="cycling",
                        help="the time series' protocol, spectra are eis (default %(default)s)")
    ingest.add_argument("--cell-pattern", metavar="REGEX", help="its group 'cell' (or first "
                        "group) in a file's name is the cell (default: the name sans suffix)")
    ingest.add_argument("--overwrite", action="store_true", help="replace an earlier ingest's "
                        "output (default: refuse an --out that is not empty)")

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


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for info in _SERVER_FLAGS:
        value = getattr(args, info.name, None)
        if value is not None:
            overrides[info.name] = tuple(value) if isinstance(value, list) else value
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise CliError(_settings_problem(exc)) from None


class CliError(Exception):
    """A mistake on the command line or in ``WINDPIPE_*``: printed, exit status 2."""


def _settings_problem(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        info = _BY_NAME.get(str(err["loc"][0])) if err["loc"] else None
        where = "?" if info is None else (
            f"{info.flag} / {info.variable}" if info.flag else info.variable)
        parts.append(f"{where}: {err['msg']}")
    return "invalid settings: " + "; ".join(parts)


def _check_port(host: str, port: int, *, flag: str, variable: str) -> None:
    """Refuse a port another process listens on, naming it and how to change it."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            msg = (f"port {port} on {host} is taken ({exc.strerror}); pick another with "
                   f"{flag} PORT (or {variable}), or 0 for any free port")
            raise CliError(msg) from None


def _wait_for_stop() -> None:
    stop = threading.Event()

    def _handler(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    stop.wait()


def _serve(args: argparse.Namespace) -> int:
    from services.exposure import InsecureDeploymentError  # noqa: PLC0415

    try:
        return _serve_until_stopped(args)
    except InsecureDeploymentError as exc:
        print(f"windpipe serve: {exc}", file=sys.stderr)
        return 2


def _serve_until_stopped(args: argparse.Namespace) -> int:
    from services.logging import configure_logging  # noqa: PLC0415

    settings = _settings(args)
    _check_roots(settings)
    if args.service in ("all", "flight"):
        _check_port(settings.resolved_flight_host(), settings.flight_port,
                    flag="--flight-port", variable="WINDPIPE_FLIGHT_PORT")
    if args.service in ("all", "catalog"):
        _check_port(settings.host, settings.port, flag="--port", variable="WINDPIPE_PORT")
    configure_logging(level=settings.log_level, json=settings.log_json)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    running: list[Any] = []
    try:
        if args.service in ("all", "flight"):
            from flight_server.runner import start_flight_server  # noqa: PLC0415

            flight = start_flight_server(settings)
            running.append(flight)
            if not settings.flight_locations:
                settings = settings.model_copy(update={"flight_locations": (flight.location,)})
            print(f"windpipe flight ready at {flight.location}", flush=True)
        if args.service in ("all", "catalog"):
            from catalog.api.server import start_catalog_server  # noqa: PLC0415

            catalog = start_catalog_server(settings)
            running.append(catalog)
            print(f"windpipe catalog ready at {catalog.url}", flush=True)
        _wait_for_stop()
    finally:
        for service in reversed(running):
            service.stop(grace_s=settings.shutdown_grace_s)
        if running:  # nothing to say for a server that never started
            print("windpipe stopped", flush=True)
    return 0


def _check_roots(settings: Settings) -> None:
    """Refuse an allowed root the servers could not use, in one line (a relative
    directory was already taken from the working directory by ``Settings``)."""
    from services.storage.roots import AllowedRoots  # noqa: PLC0415

    try:
        AllowedRoots.parse(settings.resolved_allowed_roots())
    except ValueError as exc:
        raise CliError(f"--allow-root / WINDPIPE_ALLOWED_ROOTS: {exc}") from None


def _migrate(args: argparse.Namespace) -> int:
    from migrations import upgrade_database  # noqa: PLC0415

    settings = _settings(args)
    url = settings.resolved_database_url()
    upgrade_database(url, args.revision)
    print(f"database at revision {args.revision}: {url.split('@')[-1]}")
    return 0


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> int:
    """Seconds of ``90``, ``90s``, ``15m``, ``12h`` or ``30d`` (argparse type)."""
    unit = _UNITS.get(text[-1:].lower(), 0)
    number = text[:-1] if unit else text
    try:
        value = float(number) * (unit or 1)
    except ValueError:
        msg = f"{text!r} is not a duration: seconds, or a number with s, m, h or d (90d)"
        raise argparse.ArgumentTypeError(msg) from None
    return int(value)


def _open_catalog_database(settings: Settings, *, create: bool) -> Any:
    """The token commands' catalog database, upgraded. One without a catalog (no SQLite
    file, no tables) is made only with ``create``: a typo in ``--data-dir`` (or the wrong
    directory) would else mint tokens into a new, empty catalog no server reads."""
    import sqlalchemy as sa  # noqa: PLC0415

    from migrations import upgrade_engine  # noqa: PLC0415
    from services.database import create_engine  # noqa: PLC0415

    url = sa.engine.make_url(settings.resolved_database_url())
    sqlite = url.get_backend_name() == "sqlite"
    where = (url.database or "?") if sqlite else url.render_as_string(hide_password=True)
    missing = (f"no catalog database at {where}: point --data-dir or --database-url "
               "(WINDPIPE_DATABASE_URL) at the catalog's (`windpipe token create --create` "
               "makes a new one)")
    if sqlite and url.database not in (None, "", ":memory:") and not create and not Path(
            url.database).exists():
        raise CliError(missing)
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        if not create and not sa.inspect(engine).has_table("alembic_version"):
            raise CliError(missing.replace("no catalog database", "no catalog in the database"))
        upgrade_engine(engine)
    except (sa.exc.SQLAlchemyError, CliError) as exc:
        engine.dispose()
        if isinstance(exc, CliError):
            raise
        raise CliError(f"cannot open the catalog database at {where} "
                       f"({type(exc).__name__}; is it running?)") from None
    return engine


def _token(args: argparse.Namespace) -> int:
    from catalog import principals  # noqa: PLC0415
    from catalog.service import CatalogContext  # noqa: PLC0415
    from services.contract.errors import WindpipeError  # noqa: PLC0415

    settings = _settings(args)
    engine = _open_catalog_database(settings, create=getattr(args, "create", False))
    try:
        ctx = CatalogContext.from_engine(engine)
        if args.token_command == "create":
            row, text = principals.create_token(ctx, name=args.name, role=args.role,
                                                datasets=args.datasets, created_by="cli",
                                                expires_in_s=args.expires_in)
            scope = f" on datasets {row.datasets!r}" if row.datasets else ""
            until = f", expires {row.expires_at:%Y-%m-%d %H:%M} UTC" if row.expires_at else ""
            print(f"token {row.name!r} ({row.role}{scope}{until}); shown once, keep it "
                  "secret:")
            print(text)
        elif args.token_command == "list":
            for row in principals.list_tokens(ctx):
                state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
                if row.expires_at is not None and not row.revoked_at:
                    state += f", expires {row.expires_at:%Y-%m-%d %H:%M} UTC"
                print(f"{row.name}\t{row.role}\t{row.datasets or '*'}\t{state}")
        else:
            principals.revoke_token(ctx, args.name)
            print(f"token {args.name!r} revoked")
    except WindpipeError as exc:
        print(f"windpipe token: {exc.message}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    return 0


def _synth(args: argparse.Namespace) -> int:
    from services.synth import write_synthetic_dataset  # noqa: PLC0415

    result = write_synthetic_dataset(
        args.directory, cells=args.cells, cycles=args.cycles,
        rows_per_cycle=args.rows_per_cycle, seed=args.seed, zarr_fraction=args.zarr_fraction,
        hppc_every=args.hppc_every, eis_every=args.eis_every,
        missing_channel=args.missing_channel, missing_cells=args.missing_cells,
        missed_tests=args.missed_tests,
    )
    print(f"wrote {result.n_rows} rows in {result.n_segments} segments to {result.path}")
    print(f"manifest: {result.manifest_path}")
    return 0


def _upload(args: argparse.Namespace) -> int:
    from services.storage.store import Storage, StorageOptions  # noqa: PLC0415

    source = args.directory.resolve()
    if not source.is_dir():
        raise CliError(f"{args.directory} is not a folder")
    try:
        options = StorageOptions.from_settings(Settings())
    except ValidationError as exc:
        raise CliError(_settings_problem(exc)) from None
    try:
        store = Storage.from_uri(args.destination, options)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    files = sorted(p for p in source.rglob("*") if p.is_file())
    total = 0
    for path in files:
        data = path.read_bytes()
        try:
            store.put(path.relative_to(source).as_posix(), data)
        except Exception as exc:  # obstore's errors: no bucket, refused, unreachable
            raise CliError(f"{path}: {exc}") from None
        total += len(data)
    print(f"uploaded {len(files)} files ({total} bytes) to {store.uri}")
    print(f"register it with root={store.uri!r}")
    return 0


def _ingest(args: argparse.Namespace) -> int:
    from services.ingest import IngestError, ingest_exports  # noqa: PLC0415

    try:
        result = ingest_exports(args.inputs, args.out, cycler=args.cycler, set_id=args.set_id,
                                protocol=args.protocol, cell_pattern=args.cell_pattern,
                                overwrite=args.overwrite)
    except (IngestError, ImportError) as exc:
        print(f"windpipe ingest: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {result.n_rows} rows of {result.n_cells} cells in {result.n_segments} "
          f"segments to {result.path}\nregister: cat.register(NAME, "
          f"root={result.path.as_uri()!r}, manifest='manifest.parquet')")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from windpipe.demo import run_demo  # noqa: PLC0415

    run_demo(data_dir=args.data_dir, rows_per_cycle=args.rows_per_cycle, device=args.device)
    return 0


def _bench_checkout() -> Path | None:
    """The repository checkout holding ``bench/`` (not installed: it runs from a checkout)."""
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if (candidate / "bench" / "__main__.py").is_file():
            return candidate
    return None


def _bench(argv: list[str]) -> int:
    checkout = _bench_checkout()
    if checkout is None:
        print("windpipe bench: the benchmarks run from a checkout of the windpipe repository "
              "(bench/ is not installed); run `windpipe bench` inside one", file=sys.stderr)
        return 2
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    from bench.__main__ import main as bench_main  # noqa: PLC0415

    return bench_main(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``windpipe`` console script."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["bench"]:  # every option belongs to the benchmark's own parser
        return _bench(given[1:])
    args = build_parser().parse_args(given)
    handlers = {"serve": _serve, "migrate": _migrate, "token": _token, "synth": _synth,
                "upload": _upload, "ingest": _ingest, "demo": _demo}
    try:
        return handlers[args.command](args)
    except CliError as exc:
        print(f"windpipe {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
