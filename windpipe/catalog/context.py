"""What every catalog rule runs over: :class:`CatalogContext`.

Its own module, light to import (no polars, no index or registration code), so a
command that only reads or writes tokens (``windpipe token``) does not load the
whole catalog.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from windpipe.services.contract.limits import Limits
from windpipe.services.memo import Memo, deep_nbytes
from windpipe.services.storage.packs import PackStore
from windpipe.services.storage.roots import RootScopes
from windpipe.services.storage.store import StorageOptions

__all__ = ["CatalogContext"]


@dataclass
class CatalogContext:
    """What the rules need: sessions, storage options, the operator's root scopes, a
    cache of immutable values (index frames, segment tables, decoded plans, epoch
    schedules) and where registration writes packs."""

    sessions: sessionmaker[Session]
    storage: StorageOptions = field(default_factory=StorageOptions)
    cache: Memo[tuple[Any, ...], Any] = field(default_factory=lambda: _cache(32, 512 << 20))
    limits: Limits = field(default_factory=Limits)
    root_scopes: RootScopes = field(default_factory=RootScopes)
    packs: PackStore | None = None  # where registration writes packs (None: it does not)

    @classmethod
    def from_engine(
        cls, engine: Engine, *, storage: StorageOptions | None = None, cache_size: int = 32,
        cache_bytes: int = 512 << 20, limits: Limits | None = None,
        root_scopes: RootScopes | None = None, packs: PackStore | None = None,
    ) -> CatalogContext:
        """A context over ``engine`` (sessions keep loaded rows usable after commit)."""
        return cls(
            sessions=sessionmaker(engine, expire_on_commit=False),
            storage=storage or StorageOptions(),
            cache=_cache(cache_size, cache_bytes),
            limits=limits or Limits(),
            root_scopes=root_scopes or RootScopes(),
            packs=packs,
        )


def _cache(entries: int, nbytes: int) -> Memo[tuple[Any, ...], Any]:
    """At most ``entries`` immutable values and ``nbytes`` bytes of their arrays."""
    return Memo(entries, max_bytes=nbytes, weigh=deep_nbytes)
