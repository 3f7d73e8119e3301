"""Safe defaults: a server reachable from the network refuses to start unprotected.

Binding a non-loopback host without API tokens configured, or (a Flight server) with
the published development ticket secret, raises :class:`InsecureDeploymentError` naming what
to set. What counts as tokens: ``WINDPIPE_ADMIN_TOKEN`` or a stored token in the database, for
the catalog and a database-backed Flight server; for a Flight server that asks its
catalog over REST (``--catalog-url``), only the catalog's own answer: it must refuse an
anonymous ``GET /v1/whoami`` (``catalog_decides=True``; the Flight server's own
``WINDPIPE_ADMIN_TOKEN`` admits nobody there). ``insecure=True`` (``--insecure``,
``WINDPIPE_INSECURE``) starts anyway and logs a warning at every start. Loopback (the
embedded single-user mode) needs nothing.

:func:`is_local_peer` is the other half: the open ``local`` principal of a catalog
without tokens is granted only to callers on this host (a loopback address), whatever
address the server binds, so ``--insecure`` never opens it to the network.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from windpipe.services.contract.errors import WindpipeError
from windpipe.services.logging import get_logger
from windpipe.services.settings import DEV_TICKET_SECRET, Settings, is_loopback

__all__ = ["InsecureDeploymentError", "check_exposure", "is_local_peer"]

_log = get_logger("windpipe.security")


class InsecureDeploymentError(RuntimeError):
    """A server would listen on the network without protection."""


def is_local_peer(host: str | None) -> bool:
    """Whether a caller's address is on this host: ``localhost``, 127/8, ``::1`` (also as
    an IPv4-mapped IPv6 address); never an unknown or empty address."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host == "localhost"
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback


def _tokens_problem(settings: Settings, *, tokens_configured: Callable[[], bool],
                    catalog_decides: bool) -> str | None:
    """Why callers would not need a token (None: they do)."""
    try:
        if (not catalog_decides and settings.admin_token is not None) or tokens_configured():
            return None
    except WindpipeError as exc:  # the catalog could not be asked
        return f"cannot tell whether callers need a token: {exc.message}"
    if catalog_decides:
        return ("its catalog (--catalog-url) answers calls without a token, as the open "
                "`local` admin (it has no tokens): create tokens on the catalog "
                "(WINDPIPE_ADMIN_TOKEN there, or `windpipe token create`)")
    return ("no API token is configured: set WINDPIPE_ADMIN_TOKEN (a bootstrap admin "
            "token) or create tokens with `windpipe token create`")


def check_exposure(settings: Settings, *, service: str, host: str,
                   tokens_configured: Callable[[], bool], signs_tickets: bool,
                   catalog_decides: bool = False) -> None:
    """Refuse (or, with ``settings.insecure``, warn about) an unprotected exposed server.

    ``tokens_configured``: whether tokens exist (asked only for a non-loopback host; it
    may raise ``WindpipeError`` when it cannot tell, which refuses too);
    ``catalog_decides``: a REST-backed Flight server, whose callers only the catalog's
    tokens admit (``WINDPIPE_ADMIN_TOKEN`` of this process does not count).
    """
    if settings.insecure:
        _log.warning("security.insecure", service=service, host=host,
                     message="--insecure: this server may run without tokens or with the "
                             "development ticket secret; never use it on a shared network")
    if is_loopback(host):
        return
    problems = []
    problem = _tokens_problem(settings, tokens_configured=tokens_configured,
                              catalog_decides=catalog_decides)
    if problem is not None:
        problems.append(problem)
    if signs_tickets and settings.ticket_secret.get_secret_value() == DEV_TICKET_SECRET:
        problems.append("the Flight ticket secret is the published development default: "
                        "set WINDPIPE_TICKET_SECRET to a long random string")
    if problems and not settings.insecure:
        raise InsecureDeploymentError(
            f"refusing to serve the {service} on non-loopback host {host!r}: "
            + "; ".join(problems) + " (or pass --insecure to accept the risk)")
