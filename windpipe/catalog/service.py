"""The catalog's rules: register versions, make splits, read indexes (plans:
``windpipe.catalog.plans``).

Plain functions over a :class:`CatalogContext` (session factory, storage options and
a cache of immutable frames). Each write is one transaction: a registration that
fails anywhere stores nothing, and one that loses a race to an identical
registration returns the winner's version. Versions, splits and plans are
content-addressed, so repeating a request returns the existing resource
(``Created.created`` is False, which the REST layer answers with 200 instead of 201).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Generic, TypeVar

import polars as pl
from sqlalchemy.exc import IntegrityError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from windpipe.catalog.bad_files import SkippedFiles, skipped_warning
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.index import build_index
from windpipe.catalog.limits import (
    check_description,
    check_int64,
    check_manifest_rows,
)
from windpipe.catalog.manifest import load_manifest, manifest_from_rows
from windpipe.catalog.models import Dataset, SplitRow, Version
from windpipe.catalog.pattern import PatternSource, manifest_from_pattern
from windpipe.catalog.profile import profile_for, profile_warnings
from windpipe.catalog.protocol_warnings import protocol_warnings
from windpipe.catalog.registration import PreparedVersion, prepare_version, registered_elsewhere
from windpipe.catalog.repository import Page, Repository
from windpipe.catalog.retire import check_version_live
from windpipe.catalog.splits import assign_splits, cell_leakage, split_counts
from windpipe.services.contract.configs import ValidationConfig
from windpipe.services.contract.errors import InvalidRequest, NotFound, WindpipeError
from windpipe.services.contract.identity import canonical_json
from windpipe.services.contract.stats import VersionProfile
from windpipe.services.database import session_scope
from windpipe.services.storage.store import open_root

__all__ = [
    "Created",
    "content_id",
    "create_split",
    "fetch",
    "get_dataset",
    "get_split",
    "get_version",
    "list_versions",
    "not_found",
    "register_version",
    "split_index",
    "version_index",
]

T = TypeVar("T")
_RETRIES = 3  # tries of a registration's insert (a lost race, then the winner found)


@dataclass(frozen=True)
class Created(Generic[T]):
    """A resource and whether this call created it (False: it already existed); a
    registration's warnings and the files it left out (``on_bad_file="skip"``)."""

    value: T
    created: bool
    warnings: tuple[dict[str, Any], ...] = ()
    skipped: SkippedFiles = field(default_factory=SkippedFiles)


def content_id(prefix: str, *parts: Any) -> str:
    """``<prefix>-<32 hex>``: a digest of the canonical JSON of ``parts``."""
    digest = hashlib.blake2b(canonical_json(list(parts)), digest_size=16).hexdigest()
    return f"{prefix}-{digest}"


def not_found(kind: str, key: str) -> WindpipeError:
    """The ``not_found`` error of one catalog resource (``{kind} {key!r} does not exist``)."""
    return NotFound(f"{kind} {key!r} does not exist", details={kind: key})


def fetch(ctx: CatalogContext, kind: str, key: str,
          get: Callable[[Repository, str], T | None]) -> T:
    """``get(repo, key)`` in its own session, or the ``not_found`` error of ``kind``."""
    with session_scope(ctx.sessions) as session:
        row = get(Repository(session), key)
    if row is None:
        raise not_found(kind, key)
    return row


# -- datasets and versions ------------------------------------------------------------


def get_dataset(ctx: CatalogContext, name: str) -> Dataset:
    """The dataset ``name`` or ``not_found``."""
    return fetch(ctx, "dataset", name, Repository.get_dataset)


def list_datasets(ctx: CatalogContext, *, page_size: int, page_token: str | None,
                  visible: Callable[[str], bool] | None = None) -> Page[Dataset]:
    """Datasets by name; ``visible`` (a scoped caller's test of a name) hides the others."""
    with session_scope(ctx.sessions) as session:
        return Repository(session).list_datasets(page_size=page_size, page_token=page_token,
                                                 visible=visible)


def list_versions(
    ctx: CatalogContext, name: str, *, page_size: int, page_token: str | None,
    include_retired: bool = False,
) -> Page[Version]:
    """Versions of dataset ``name``, oldest first (retired ones only when asked)."""
    with session_scope(ctx.sessions) as session:
        repo = Repository(session)
        dataset = repo.get_dataset(name)
        if dataset is None:
            raise not_found("dataset", name)
        return repo.list_versions(dataset.id, page_size=page_size, page_token=page_token,
                                  include_retired=include_retired)


def get_version(ctx: CatalogContext, version_id: str) -> Version:
    """The version ``version_id`` or ``not_found``."""
    return fetch(ctx, "version", version_id, Repository.get_version)


def register_version(
    ctx: CatalogContext, name: str, *, root: str, manifest: str | None = None,
    rows: list[dict[str, Any]] | None = None, pattern: PatternSource | None = None,
    description: str | None = None, visible: Callable[[str], bool] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> Created[Version]:
    """Validate a manifest and all its segments, then store the version in one transaction.

    Exactly one of ``manifest`` (a path under ``root``), ``rows`` and ``pattern`` (the
    manifest built from the files under ``root``, ``windpipe.catalog.pattern``) is given. A root
    the operator does not allow, or one bound to other dataset names
    (``ctx.root_scopes``), is ``forbidden`` before anything is read. A pattern's
    ``on_bad_file="skip"`` leaves out the files that cannot be read as segments
    (``Created.skipped``, and a ``skipped_files`` warning). The same content
    again returns the existing version (``created=False``); content already registered
    under another dataset is a ``conflict``, naming that dataset and version only when
    ``visible(dataset)`` (None: the caller sees every dataset).
    """
    if sum(source is not None for source in (manifest, rows, pattern)) != 1:
        raise InvalidRequest("give exactly one of 'manifest' (a path), 'rows' and 'pattern'")
    check_description(description, ctx.limits)
    if rows is not None:
        check_manifest_rows(len(rows), ctx.limits)
    if ctx.storage.allowed is not None:
        ctx.storage.allowed.check(root)  # the same answer for every root not allowed
    ctx.root_scopes.check(root, dataset=name)
    storage = open_root(root, ctx.storage)
    # a manifest file's size and rows are checked before it is read and decoded
    frame = (load_manifest(storage, manifest, limits=ctx.limits) if manifest is not None
             else manifest_from_pattern(storage, pattern, dataset=name, limits=ctx.limits)
             if pattern is not None else manifest_from_rows(rows or []))
    check_manifest_rows(frame.height, ctx.limits)
    report = progress or (lambda _phase, _done, _total: None)  # (phase, segments done, of)
    pack = (ctx.packs.writer(storage.uri) if ctx.packs is not None and storage.is_local
            else None)
    try:
        prepared = prepare_version(
            storage, frame, progress=partial(report, "checking"), pack=pack,
            on_bad_file=pattern.on_bad_file if pattern is not None else "stop")
        profile = profile_for(ctx.sessions, storage, prepared,  # nulls, infinities, sampling
                              progress=partial(report, "profiling"))
        report("storing", prepared.segments.height, prepared.segments.height)
        created = _store_with_retries(ctx, name, prepared, description, visible,
                                      profile=profile)
    except BaseException:
        if pack is not None:
            pack.abort()
        raise
    if pack is not None:  # after the version: a pack is never there without its version
        pack.commit(prepared.version_id)
    if prepared.skipped:
        created = replace(created, skipped=prepared.skipped,
                          warnings=(skipped_warning(prepared.skipped), *created.warnings))
    return created


def _store_with_retries(
    ctx: CatalogContext, name: str, prepared: PreparedVersion, description: str | None,
    visible: Callable[[str], bool] | None, *, profile: VersionProfile,
) -> Created[Version]:
    """Store, again at once after a lost race: the unique key an identical registration
    inserted first (``IntegrityError``) makes the next try find the winner's version.
    tenacity states the policy (what to retry, how often, no wait); the error of the
    last try is raised as is. Not the ``Transient`` branch: a database that is down is
    answered 503 here and retried by the client (``windpipe.sdk._rest``)."""
    retrying = Retrying(stop=stop_after_attempt(_RETRIES),
                        retry=retry_if_exception_type(IntegrityError), reraise=True)
    return retrying(_store_version, ctx, name, prepared, description, visible,
                    profile=profile)


def _store_version(
    ctx: CatalogContext, name: str, prepared: PreparedVersion, description: str | None,
    visible: Callable[[str], bool] | None, *, profile: VersionProfile,
) -> Created[Version]:
    with session_scope(ctx.sessions) as session:
        repo = Repository(session)
        existing = repo.get_version(prepared.version_id)
        if existing is not None:
            if existing.dataset.name != name:
                raise registered_elsewhere(dataset=name, version_id=existing.id,
                                           holder=existing.dataset.name, visible=visible)
            return Created(existing, created=False,
                           warnings=_registration_warnings(repo, prepared, profile))
        dataset = repo.get_dataset(name) or repo.add_dataset(name)
        manifest_rows = prepared.manifest_rows
        metadata = list(prepared.metadata_columns)
        version = Version(
            id=prepared.version_id,
            dataset_id=dataset.id,
            seq=repo.next_version_seq(),
            root_uri=prepared.root_uri,
            description=description,
            n_manifest_rows=manifest_rows.height,
            n_segments=prepared.segments.height,
            n_rows=int(manifest_rows["row_count"].sum()),
            schema=_plain_schema(prepared.schema),
            metadata_columns=[
                {"name": c, "dtype": str(manifest_rows.schema[c])} for c in metadata
            ],
            profile=profile.model_dump(mode="json"),
        )
        repo.add_version(version)
        repo.insert_manifest_rows(version.id, _with_metadata_json(manifest_rows, metadata))
        repo.insert_segments(version.id, prepared.segments)
        session.flush()
        session.refresh(version)
        return Created(version, created=True,
                       warnings=_registration_warnings(repo, prepared, profile))


def _registration_warnings(
    repo: Repository, prepared: PreparedVersion, profile: VersionProfile,
) -> tuple[dict[str, Any], ...]:
    counts = prepared.manifest_rows.get_column("protocol").value_counts()
    rows = {str(p): int(n) for p, n in counts.iter_rows()}
    elsewhere, others = repo.protocols_elsewhere(prepared.version_id)
    return (*protocol_warnings(rows, elsewhere=elsewhere, other_versions=others),
            *profile_warnings(profile))


def _plain_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        str(p): [dict(c) if not hasattr(c, "as_dict") else c.as_dict() for c in cols]
        for p, cols in schema.items()
    }


def _with_metadata_json(frame: pl.DataFrame, metadata: list[str]) -> pl.DataFrame:
    if not metadata:
        return frame.with_columns(pl.lit("{}").alias("metadata"))
    return frame.with_columns(pl.struct(metadata).struct.json_encode().alias("metadata"))


def _manifest_frame(repo: Repository, version: Version) -> pl.DataFrame:
    """The manifest rows of a stored version, as ``prepare_version`` produced them."""
    rows = repo.load_manifest_rows(version.id)
    dtypes = {m["name"]: _dtype(m["dtype"]) for m in version.metadata_columns}
    base = pl.DataFrame(
        {
            "manifest_row_id": [r.manifest_row_id for r in rows],
            "position": [r.position for r in rows],
            "set_id": [r.set_id for r in rows],
            "cell_id": [r.cell_id for r in rows],
            "cidx": [r.cidx for r in rows],
            "protocol": [r.protocol for r in rows],
            "row_count": [r.row_count for r in rows],
        },
        schema={
            "manifest_row_id": pl.Int64, "position": pl.Int64, "set_id": pl.String,
            "cell_id": pl.String, "cidx": pl.Int64, "protocol": pl.String, "row_count": pl.Int64,
        },
    )
    meta = {
        name: pl.Series(name, [r.metadata_.get(name) for r in rows], dtype=dtype, strict=False)
        for name, dtype in dtypes.items()
    }
    return base.with_columns(list(meta.values())) if meta else base


def _dtype(name: str) -> pl.DataType | None:
    value = getattr(pl, name, None)
    if isinstance(value, type) and issubclass(value, pl.DataType):
        return value()
    return None


def version_index(ctx: CatalogContext, version_id: str) -> pl.DataFrame:
    """The ML index of a version (cached: versions never change)."""

    def make() -> pl.DataFrame:
        with session_scope(ctx.sessions) as session:
            repo = Repository(session)
            version = repo.get_version(version_id)
            if version is None:
                raise not_found("version", version_id)
            return build_index(_manifest_frame(repo, version), repo.load_segments(version_id))

    return ctx.cache.get(("index", version_id), make)


def version_segments(ctx: CatalogContext, version_id: str) -> pl.DataFrame:
    """The segment table of a version (cached)."""

    def make() -> pl.DataFrame:
        with session_scope(ctx.sessions) as session:
            repo = Repository(session)
            if repo.get_version(version_id) is None:
                raise not_found("version", version_id)
            return repo.load_segments(version_id)

    return ctx.cache.get(("segments", version_id), make)


def list_segments(
    ctx: CatalogContext, version_id: str, *, page_size: int, page_token: str | None
) -> Page[Any]:
    """A page of a version's segments."""
    with session_scope(ctx.sessions) as session:
        repo = Repository(session)
        if repo.get_version(version_id) is None:
            raise not_found("version", version_id)
        return repo.list_segments(version_id, page_size=page_size, page_token=page_token)


# -- splits ---------------------------------------------------------------------------


def get_split(ctx: CatalogContext, split_id: str) -> SplitRow:
    """The split ``split_id`` or ``not_found``."""
    return fetch(ctx, "split", split_id, Repository.get_split)


def create_split(ctx: CatalogContext, version_id: str, config: ValidationConfig,
                 ) -> Created[SplitRow]:
    """Assign every manifest row of a version to ``train`` or ``val`` and store it.

    Unknown columns and selectors that match nothing are ``invalid_config``; a retired
    version is ``conflict``.
    """
    check_version_live(get_version(ctx, version_id))
    config_json = config.model_dump(mode="json")
    check_int64(config_json)
    split_id = content_id("s", version_id, config_json)
    with session_scope(ctx.sessions) as session:
        existing = Repository(session).get_split(split_id)
    if existing is not None:
        return Created(existing, created=False)
    assigned = assign_splits(version_index(ctx, version_id), config)
    counts = split_counts(assigned, group_by=config.group_by)
    leakage = cell_leakage(assigned).model_dump(mode="json")
    try:
        with session_scope(ctx.sessions) as session:
            repo = Repository(session)
            split = SplitRow(id=split_id, version_id=version_id, config=config_json, counts=counts,
                             leakage=leakage)
            repo.add_split(split)
            repo.insert_assignments(split_id, assigned)
            session.flush()
            session.refresh(split)
            return Created(split, created=True)
    except IntegrityError:
        return Created(get_split(ctx, split_id), created=False)


def split_index(ctx: CatalogContext, split_id: str) -> pl.DataFrame:
    """The version's index with the split's ``split`` column (cached)."""

    def make() -> pl.DataFrame:
        split = get_split(ctx, split_id)
        index = version_index(ctx, split.version_id)
        with session_scope(ctx.sessions) as session:
            assignments = Repository(session).load_assignments(split_id)
        return index.drop("split", strict=False).join(
            assignments, on="manifest_row_id", how="left", maintain_order="left"
        )

    return ctx.cache.get(("split_index", split_id), make)
