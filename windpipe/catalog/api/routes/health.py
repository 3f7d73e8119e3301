"""Liveness, readiness and discovery."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Request
from sqlalchemy.engine import Engine

from windpipe.catalog.api.auth import CurrentPrincipal, require
from windpipe.catalog.api.deps import AppSettings, Discovery
from windpipe.catalog.api.schemas import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, ConfigOut, HealthOut
from windpipe.services.contract.errors import Unavailable
from windpipe.services.contract.principals import LOCAL, Role

__all__ = ["READY_TIMEOUT_S", "router", "v1"]

router = APIRouter(tags=["health"])
v1 = APIRouter(tags=["health"])
_READ = [Depends(require(Role.READER))]

STORAGE_SCHEMES = ["file", "s3"]
READY_TIMEOUT_S = 0.9


@router.get("/healthz", operation_id="healthz", response_model=HealthOut)
async def healthz() -> HealthOut:
    """The process is alive (answered on the event loop: no worker thread, no database,
    so blocked requests cannot delay it)."""
    return HealthOut()


@router.get("/readyz", operation_id="readyz", response_model=HealthOut)
async def readyz(request: Request) -> HealthOut:
    """The database answers within ``READY_TIMEOUT_S`` (503 ``unavailable`` otherwise).

    The probe runs on the app's own small thread pool, not the one the routes share,
    so a pool full of blocked requests cannot delay it.
    """
    pool: ThreadPoolExecutor = request.app.state.ready_pool
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(
            loop.run_in_executor(pool, _ping, request.app.state.engine), READY_TIMEOUT_S
        )
    except TimeoutError as exc:
        raise Unavailable(
            f"database did not answer within {READY_TIMEOUT_S} s"
        ) from exc
    except sa.exc.SQLAlchemyError as exc:
        raise Unavailable(
            f"database unreachable: {type(exc).__name__}"
        ) from exc
    return HealthOut()


def _ping(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))


@v1.get("/config", operation_id="get_config", dependencies=_READ, response_model=ConfigOut)
def get_config(request: Request, settings: AppSettings, discovery: Discovery,
               principal: CurrentPrincipal) -> ConfigOut:
    """Server version, limits, Flight locations, supported storage schemes and whether
    calls need a bearer token (``none`` only for the open, loopback ``local`` catalog).

    The Flight locations are the configured ones and those ``WINDPIPE_FLIGHT_DISCOVERY``
    names now (``windpipe.services.discovery``): clients ask again to find servers added since."""
    return ConfigOut(
        server_version=request.app.version,
        limits={"default_page_size": DEFAULT_PAGE_SIZE, "max_page_size": MAX_PAGE_SIZE,
                **settings.limits().as_dict()},
        flight_locations=list(discovery.locations()),
        storage_schemes=STORAGE_SCHEMES,
        auth="none" if principal.name == LOCAL else "bearer",
    )
