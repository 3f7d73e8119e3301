"""``Catalog``: the entry point of the SDK (REST for metadata, Flight for batches).

```python
cat = Catalog("http://127.0.0.1:8000", token=None)
ver = cat.register("demo", root="file:///data/demo", manifest="manifest.parquet")
```

Flight locations come from the catalog's ``GET /v1/config`` unless given with
``flight_locations=[...]``. ``Catalog()`` takes the URL and token from ``WINDPIPE_URL`` and
``WINDPIPE_TOKEN`` (arguments win). ``windpipe.embedded(data_dir)`` returns a
``Catalog`` whose catalog runs in this process (``in_process=``, ``windpipe.sdk._in_process``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import polars as pl

from windpipe.sdk._exceptions import DataWarning, InvalidRequest, RegistrationWarning, WindpipeError
from windpipe.sdk._handles import DatasetVersion, Plan, Split
from windpipe.sdk._html import html_table
from windpipe.sdk._models import DatasetInfo
from windpipe.sdk._register import register_version
from windpipe.sdk._state import ClientSettings, ClientState, endpoint_from_environment
from windpipe.services.contract.stats import DATA_WARNINGS

if TYPE_CHECKING:
    import httpx

    from windpipe.sdk._in_process import InProcess
    from windpipe.sdk._stream import FlightStream

__all__ = ["Catalog"]


class Catalog:
    """A client of one windpipe deployment.

    ``url``: the catalog's REST base URL, else ``WINDPIPE_URL``. ``token``: bearer token,
    sent to the catalog and to the Flight servers, else ``WINDPIPE_TOKEN`` when the URL is
    ``WINDPIPE_URL``'s (a token never goes to a catalog it was not set for); an argument
    always wins over its variable. With neither a URL nor ``WINDPIPE_URL``:
    :class:`InvalidConfig` saying what to do (a URL, or ``windpipe.embedded(data_dir)``).
    ``in_process``: a catalog run in this process (what ``windpipe.embedded`` passes;
    ``url`` and the Flight options then do not apply). ``flight_locations``:
    ``grpc://host:port`` of the Flight servers, when the catalog's ``/v1/config`` should
    not be asked. ``read_timeout``:
    seconds to wait for each Flight batch before failing over to another server
    (``None``: wait forever). ``location_map``: rewrites the Flight locations the
    deployment advertises into ones this machine reaches
    (``{"flight-1:8815": "localhost:8815"}``; default: the
    ``WINDPIPE_FLIGHT_LOCATION_MAP`` variable; see ``windpipe.sdk._locations``).
    ``http_transport``: the ``httpx`` transport of the REST calls (a test's seam, e.g.
    ``httpx.MockTransport``); not the batch path, which is the loader option
    ``transport``.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        read_timeout: float | None = 60.0,
        flight_locations: Sequence[str] | None = None,
        http_transport: httpx.BaseTransport | None = None,
        location_map: Mapping[str, str] | None = None,
        in_process: InProcess | None = None,
    ) -> None:
        if in_process is not None:
            url = in_process.url
        else:
            url, token = endpoint_from_environment(url, token)
        self.url = url.rstrip("/")
        self._state = ClientState(ClientSettings(
            url=self.url, token=token, timeout=timeout, retries=retries,
            read_timeout=read_timeout,
            flight_locations=tuple(flight_locations) if flight_locations else None,
            location_map=location_map, in_process=in_process,
        ), http_transport=http_transport)

    def __repr__(self) -> str:
        return f"Catalog({self.url!r})"

    def _repr_html_(self) -> str:
        settings = self._state.settings
        rows: list[tuple[str, Any]] = [
            ("url", self.url), ("token", "set" if settings.token else "none"),
            ("flight", list(settings.flight_locations or ()) or "from /v1/config"),
        ]
        if settings.in_process is not None:
            rows[1:] = [("flight", "none: the catalog runs in this process, batches are "
                                   "built here")]
        if settings.location_map:
            rows.append(("location_map", dict(settings.location_map)))
        try:
            rows.append(("datasets", [d.name for d in self.datasets()]))
        except WindpipeError as exc:  # a repr never raises: say why instead
            rows.append(("datasets", f"unavailable: {exc}"))
        return html_table(f"Catalog {self.url}", rows)

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP and Flight connections."""
        self._state.close()

    # -- metadata -------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The deployment's ``/v1/config``: limits, features, Flight locations."""
        return self._state.config()

    def health(self) -> bool:
        """True when the catalog answers ``/readyz``."""
        self._state.get_json("/readyz")
        return True

    def register(
        self,
        name: str,
        *,
        root: str,
        manifest: str | None = None,
        rows: Sequence[dict[str, Any]] | pl.DataFrame | None = None,
        pattern: str | None = None,
        set_id: str | None = None,
        protocol: str | None = None,
        metadata: str | Sequence[dict[str, Any]] | pl.DataFrame | None = None,
        exclude: Sequence[str] | None = None,
        on_bad_file: Literal["stop", "skip"] = "stop",
        description: str | None = None,
        progress: bool | None = None,
    ) -> DatasetVersion:
        """Register a dataset version (idempotent: the same content returns the same version).

        Give one of ``manifest`` (a parquet or CSV file relative to ``root``), ``rows``
        (one dict per segment: ``set_id``, ``cell_id``, ``cidx``, ``protocol``,
        ``segment_path``, optional ``row_count`` and metadata) or ``pattern`` (no manifest:
        the catalog matches the files under ``root``, e.g.
        ``"{cell_id}/{protocol}/cycle_{cidx}.parquet"``; ``set_id`` / ``protocol`` fix
        what the pattern does not name, default the dataset's name / ``cycling``;
        ``metadata``, a side table keyed by ``cell_id``: a CSV or parquet path under
        ``root``, or its rows; ``exclude``, globs of paths under ``root`` to leave out,
        fnmatch rules on the whole relative path: ``["c07/*", "*/cycle_3.parquet"]``;
        docs/data.md). Every segment is
        validated before anything is stored; problems raise :class:`InvalidManifest`
        with ``details["problems"]``. With a pattern, ``on_bad_file="skip"`` leaves out
        the files that cannot be read as segments instead (and the other files of their
        identity), with a :class:`RegistrationWarning`; ``version.skipped`` lists each
        with its reason. A protocol name new to the catalog or close to a
        known one (``cyling``) registers, with a :class:`RegistrationWarning` and the
        details in the version's ``warnings``; nulls, infinities and irregular sampling
        found in the values (``version.profile``) with a :class:`DataWarning` each.

        A registration still running after two seconds (many segments, a slow store)
        shows ``checked / total`` segments as a progress bar until it ends, whatever the
        client's timeout; calling ``register`` again with the same arguments, from any
        process, follows the same job (``windpipe.sdk._register``).
        """
        body = _register_body(root=root, manifest=manifest, rows=rows, pattern=pattern,
                              set_id=set_id, protocol=protocol, metadata=metadata,
                              exclude=exclude, on_bad_file=on_bad_file)
        if description is not None:
            body["description"] = description
        answer, created = register_version(self._state, name, body, progress=progress)
        version = DatasetVersion.from_json(self._state, answer, created=created)
        for doubt in version.warnings:
            kind = DataWarning if doubt.get("type") in DATA_WARNINGS else RegistrationWarning
            warnings.warn(f"{name}: {doubt['message']}", kind, stacklevel=2)
        return version

    def datasets(self) -> list[DatasetInfo]:
        """Every dataset, by name."""
        return [DatasetInfo.from_json(item) for item in self._state.pages("/v1/datasets")]

    def versions(self, name: str, *, include_retired: bool = False) -> list[DatasetVersion]:
        """The versions of dataset ``name``, oldest first (retired ones only when asked)."""
        path = f"/v1/datasets/{name}/versions"
        items = (self._state.pages(path, include_retired="true") if include_retired
                 else self._state.pages(path))
        return [DatasetVersion.from_json(self._state, item) for item in items]

    def version(self, version_id: str) -> DatasetVersion:
        """A version by id."""
        body = self._state.get_json(f"/v1/versions/{version_id}")
        return DatasetVersion.from_json(self._state, body)

    def split(self, split_id: str) -> Split:
        """A split by id."""
        return Split.from_json(self._state, self._state.get_json(f"/v1/splits/{split_id}"))

    def plan(self, plan_id: str) -> Plan:
        """A plan by id (its config rebuilt from the stored planning fields)."""
        return Plan.from_json(self._state, self._state.get_json(f"/v1/plans/{plan_id}"))

    # -- streaming --------------------------------------------------------------------

    def flight(self) -> FlightStream:
        """The Flight client (created on first use from ``/v1/config``)."""
        return self._state.flight()


def _register_body(
    *, root: str, manifest: str | None, rows: Sequence[dict[str, Any]] | pl.DataFrame | None,
    pattern: str | None, set_id: str | None, protocol: str | None,
    metadata: str | Sequence[dict[str, Any]] | pl.DataFrame | None,
    exclude: Sequence[str] | None, on_bad_file: str,
) -> dict[str, Any]:
    """The registration body (``RegisterVersionIn``), checked before it is sent."""
    if sum(x is not None for x in (manifest, rows, pattern)) != 1:
        msg = ("register() takes exactly one of manifest= (a path under root), rows= or "
               "pattern=")
        raise InvalidRequest(msg)
    if isinstance(exclude, str):
        msg = "register(): exclude= is a list of globs, e.g. ['c07/*']"
        raise InvalidRequest(msg)
    extras = {"set_id": set_id, "protocol": protocol, "metadata": metadata,
              "exclude": exclude, "on_bad_file": None if on_bad_file == "stop" else on_bad_file}
    given = [name for name, value in extras.items() if value is not None]
    if pattern is None and given:
        msg = f"register(): {', '.join(given)} apply to pattern= only"
        raise InvalidRequest(msg)
    body: dict[str, Any] = {"root": root}
    if manifest is not None:
        body["manifest"] = manifest
    elif rows is not None:
        body["rows"] = rows.to_dicts() if isinstance(rows, pl.DataFrame) else list(rows)
    else:
        body["pattern"] = pattern
        body.update({k: v for k, v in (("set_id", set_id), ("protocol", protocol))
                     if v is not None})
        if exclude is not None:
            body["exclude"] = list(exclude)
        if on_bad_file != "stop":
            body["on_bad_file"] = on_bad_file
        if isinstance(metadata, str):
            body["metadata"] = metadata
        elif metadata is not None:
            body["metadata_rows"] = (metadata.to_dicts() if isinstance(metadata, pl.DataFrame)
                                     else list(metadata))
    return body
