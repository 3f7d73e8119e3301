"""Liveness, readiness and discovery."""

from __future__ import annotations

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Request

from catalog.api.auth import CurrentPrincipal, require
from catalog.api.deps import AppSettings
from catalog.api.schemas import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, ConfigOut, HealthOut
from catalog.principals import LOCAL, Role
from contract.errors import ErrorType, WindpipeError

__all__ = ["router", "v1"]

router = APIRouter(tags=["health"])
v1 = APIRouter(tags=["health"])
_READ = [Depends(require(Role.READER))]

STORAGE_SCHEMES = ["file", "s3"]


@router.get("/healthz", operation_id="healthz", response_model=HealthOut)
def healthz() -> HealthOut:
    """The process is alive."""
    return HealthOut()


@router.get("/readyz", operation_id="readyz", response_model=HealthOut)
def readyz(request: Request) -> HealthOut:
    """The database answers (503 ``unavailable`` otherwise)."""
    try:
        with request.app.state.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.SQLAlchemyError as exc:
        raise WindpipeError(
            ErrorType.UNAVAILABLE, f"database unreachable: {type(exc).__name__}"
        ) from exc
    return HealthOut()


@v1.get("/config", operation_id="get_config", dependencies=_READ, response_model=ConfigOut)
def get_config(request: Request, settings: AppSettings,
               principal: CurrentPrincipal) -> ConfigOut:
    """Server version, limits, Flight locations, supported storage schemes and whether
    calls need a bearer token (``none`` only for the open, loopback ``local`` catalog)."""
    return ConfigOut(
        server_version=request.app.version,
        limits={"default_page_size": DEFAULT_PAGE_SIZE, "max_page_size": MAX_PAGE_SIZE},
        flight_locations=list(settings.flight_locations),
        storage_schemes=STORAGE_SCHEMES,
        auth="none" if principal.name == LOCAL else "bearer",
    )
