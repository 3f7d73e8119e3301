"""``windpipe token create|list|revoke``: API tokens in the catalog database."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from windpipe.commands.common import CliError, settings_from
from windpipe.services.settings import Settings

__all__ = ["duration", "token"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> int:
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

    from windpipe.migrations import upgrade_engine  # noqa: PLC0415
    from windpipe.services.database import create_engine  # noqa: PLC0415

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


def token(args: argparse.Namespace) -> int:
    """Create, list or revoke API tokens (``args.token_command``)."""
    from windpipe.catalog import principals  # noqa: PLC0415
    from windpipe.catalog.context import CatalogContext  # noqa: PLC0415
    from windpipe.services.contract.errors import WindpipeError  # noqa: PLC0415

    settings = settings_from(args)
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
