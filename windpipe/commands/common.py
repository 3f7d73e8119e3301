"""What the ``windpipe`` subcommands share: the server flags, ``Settings`` from them, and
:class:`CliError`.

The server flags come from the fields of :mod:`windpipe.services.settings` that name one (help
text and default included); argparse's default stays None so that a flag given overrides
the ``WINDPIPE_*`` variable, which overrides the field's default.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from windpipe.services.settings import SettingInfo, Settings, setting_infos

__all__ = ["BY_NAME", "SERVER_FLAGS", "CliError", "add_server_flags", "settings_from",
           "settings_problem"]

SERVER_FLAGS: tuple[SettingInfo, ...] = tuple(i for i in setting_infos() if i.flag)
BY_NAME = {info.name: info for info in setting_infos()}


class CliError(Exception):
    """A mistake on the command line or in ``WINDPIPE_*``: printed, exit status 2."""


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


def add_server_flags(parser: argparse.ArgumentParser, *names: str) -> None:
    """The flags of settings ``names``, or every server flag when none are named."""
    for info in (SERVER_FLAGS if not names else tuple(BY_NAME[n] for n in names)):
        _add_setting_flag(parser, info)


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings of the server flags given in ``args`` over ``WINDPIPE_*``."""
    overrides: dict[str, Any] = {}
    for info in SERVER_FLAGS:
        value = getattr(args, info.name, None)
        if value is not None:
            overrides[info.name] = tuple(value) if isinstance(value, list) else value
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise CliError(settings_problem(exc)) from None


def settings_problem(exc: ValidationError) -> str:
    """One line naming each bad setting by its flag and variable."""
    parts = []
    for err in exc.errors():
        info = BY_NAME.get(str(err["loc"][0])) if err["loc"] else None
        where = "?" if info is None else (
            f"{info.flag} / {info.variable}" if info.flag else info.variable)
        parts.append(f"{where}: {err['msg']}")
    return "invalid settings: " + "; ".join(parts)
