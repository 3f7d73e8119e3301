"""Safe defaults: a server reachable from the network refuses to start unprotected.

Binding a non-loopback host without API tokens configured, or (a Flight server) with
the published development ticket secret, raises :class:`InsecureDeploymentError` naming what
to set. ``insecure=True`` (``--insecure``, ``WINDPIPE_INSECURE``) starts anyway and logs
a warning at every start. Loopback (the embedded single-user mode) needs nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from services.logging import get_logger
from services.settings import DEV_TICKET_SECRET, Settings, is_loopback

__all__ = ["InsecureDeploymentError", "check_exposure"]

_log = get_logger("windpipe.security")


class InsecureDeploymentError(RuntimeError):
    """A server would listen on the network without protection."""


def check_exposure(settings: Settings, *, service: str, host: str,
                   tokens_configured: Callable[[], bool], signs_tickets: bool) -> None:
    """Refuse (or, with ``settings.insecure``, warn about) an unprotected exposed server."""
    if settings.insecure:
        _log.warning("security.insecure", service=service, host=host,
                     message="--insecure: this server may run without tokens or with the "
                             "development ticket secret; never use it on a shared network")
    if is_loopback(host):
        return
    problems = []
    if settings.token is None and not tokens_configured():
        problems.append("no API token is configured: set WINDPIPE_TOKEN (a bootstrap admin "
                        "token) or create tokens with `windpipe token create`")
    if signs_tickets and settings.ticket_secret.get_secret_value() == DEV_TICKET_SECRET:
        problems.append("the Flight ticket secret is the published development default: "
                        "set WINDPIPE_TICKET_SECRET to a long random string")
    if problems and not settings.insecure:
        raise InsecureDeploymentError(
            f"refusing to serve the {service} on non-loopback host {host!r}: "
            + "; ".join(problems) + " (or pass --insecure to accept the risk)")
