"""A loader's runtime options (``LoaderOptions``), grouped by what each one steers.

None of them changes a batch's values, so none is part of a plan's identity
(``PlanSpec``). Three concerns, three small immutable models, each field with one
meaning everywhere:

* :class:`SourceOptions`: where a plan's batches come from and what they carry
  (``data_access``, ``transport``, ``input_valid``: ``plan.batches``, ``plan.loader``,
  ``plan.torch_dataset``);
* :class:`DeviceOptions`: how a batch reaches the device (``device``, ``pin_memory``,
  ``prefetch_to_device``, ``non_blocking``: ``plan.loader``'s device feed);
* :class:`WorkerOptions`: who reads ahead and how far (``num_workers``,
  ``prefetch_factor``, ``persistent_workers``, ``multiprocessing_context``: torch's
  ``DataLoader`` of ``plan.dataloader``, and ``plan.loader``'s read-ahead).

``prefetch_factor`` means what it means to torch: batches read ahead *per worker*, the
main process being the one worker when ``num_workers=0``; so ``plan.loader`` holds
:attr:`LoaderOptions.read_ahead` = ``prefetch_factor * max(1, num_workers)`` batches
ready, as many as a ``DataLoader`` with those options keeps in flight.

The contract (docs/types.md) lists the options flat, and the flat spelling stays the
user's: ``LoaderOptions(num_workers=2, device="cpu")`` routes each keyword into its
group before validation, and ``options.num_workers`` reads it back (a read-only
property). :meth:`LoaderOptions.merged` is the one place where a call's keyword
arguments (``plan.loader(prefetch_factor=2)``) meet the options: names checked, values
validated, a value given always winning (an explicit 0 or False too).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypedDict, get_args

from pydantic import BaseModel, Field, field_validator, model_validator

from windpipe.services.contract.errors import InvalidConfig
from windpipe.services.contract.frozen import Frozen as _Frozen

if TYPE_CHECKING:
    from typing import Unpack

__all__ = [
    "DATA_ACCESS_MODES",
    "START_METHODS",
    "TRANSPORTS",
    "DataAccess",
    "DeviceOptions",
    "LoaderOptions",
    "OptionKeywords",
    "SourceOptions",
    "StartMethod",
    "Transport",
    "WorkerOptions",
]

# the one spelling of each set; the SDK checks its arguments against these tuples
DataAccess = Literal["windowed", "full_in_mem"]
Transport = Literal["auto", "local", "flight"]
StartMethod = Literal["spawn", "forkserver", "fork"]
DATA_ACCESS_MODES: tuple[DataAccess, ...] = get_args(DataAccess)
TRANSPORTS: tuple[Transport, ...] = get_args(Transport)
START_METHODS: tuple[StartMethod, ...] = get_args(StartMethod)


class SourceOptions(_Frozen):
    """Where a plan's batches come from, and what they carry besides their values.

    ``data_access``: ``"windowed"`` loads chunks on demand, ``"full_in_mem"`` warms the
    plan's split whole first. ``transport``: ``"local"`` builds the batches in this
    process from the host's shared tier, ``"flight"`` streams them, ``"auto"`` takes the
    local path when a Flight server of the deployment shares its tier with this host.
    Both give the same batches, byte for byte. ``input_valid``: each batch also carries
    ``input_valid`` (SEMANTICS 5b: which inputs are real values, not the ``-2.0``
    fill); the other tensors are the same either way.
    """

    data_access: DataAccess = "windowed"
    transport: Transport = "auto"
    input_valid: bool = False


class DeviceOptions(_Frozen):
    """How ``plan.loader`` puts a batch on the device (docs/sdk.md, "The device feed").

    ``pin_memory`` and ``prefetch_to_device`` left None mean "when the device is CUDA".
    """

    device: str = "auto"
    pin_memory: bool | None = None
    prefetch_to_device: bool | None = None
    non_blocking: bool = True

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        ok = value in ("auto", "cpu", "cuda") or (
            value.startswith("cuda:") and value[5:].isascii() and value[5:].isdigit()
        )
        if not ok:
            msg = f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {value!r}"
            raise ValueError(msg)
        return value


class WorkerOptions(_Frozen):
    """Who reads a pass ahead and how far: torch ``DataLoader`` workers, with torch's
    meanings (``prefetch_factor`` per worker; see the module docstring)."""

    num_workers: int = Field(default=0, ge=0)
    prefetch_factor: int = Field(default=4, ge=1)
    persistent_workers: bool = False
    multiprocessing_context: StartMethod | None = None

    @property
    def read_ahead(self) -> int:
        """Batches read ahead in all: ``prefetch_factor`` per worker, the main process
        being the one worker without workers."""
        return self.prefetch_factor * max(1, self.num_workers)


class OptionKeywords(TypedDict, total=False):
    """The flat keywords of :class:`LoaderOptions` (``**options`` of the SDK's calls)."""

    data_access: DataAccess
    transport: Transport
    input_valid: bool
    device: str
    pin_memory: bool | None
    prefetch_to_device: bool | None
    non_blocking: bool
    num_workers: int
    prefetch_factor: int
    persistent_workers: bool
    multiprocessing_context: StartMethod | None


_GROUPS: Mapping[str, type[_Frozen]] = MappingProxyType({
    "source": SourceOptions, "device_feed": DeviceOptions, "workers": WorkerOptions,
})
# flat option name -> the group that holds it
_GROUP_OF: Mapping[str, str] = MappingProxyType({
    name: group for group, model in _GROUPS.items() for name in model.model_fields
})


def _close(name: str) -> str:
    close = difflib.get_close_matches(name, list(_GROUP_OF), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _route(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each flat option moved into its group; an option set both flat and
    in its group is refused (which one was meant is unknowable)."""
    flat: dict[str, dict[str, Any]] = {}
    for name, group in _GROUP_OF.items():
        if name in data:
            flat.setdefault(group, {})[name] = data[name]
    if not flat:
        return data
    routed = {k: v for k, v in data.items() if k not in _GROUP_OF}
    for group, values in flat.items():
        given = routed.get(group)
        if isinstance(given, BaseModel):
            explicit, base = given.model_fields_set, given.model_dump()
        elif isinstance(given, Mapping):
            explicit, base = set(given), dict(given)
        elif given is None:
            explicit, base = set(), {}
        else:  # not a group: let the group's own validation say so
            continue
        twice = sorted(explicit & set(values))
        if twice:
            msg = f"{', '.join(twice)} given twice: as a keyword and in {group}"
            raise ValueError(msg)
        routed[group] = {**base, **values}
    return routed


class LoaderOptions(_Frozen):
    """How the SDK delivers a plan's batches (TYPES, runtime fields), by concern:
    :attr:`source`, :attr:`device_feed`, :attr:`workers` (see the module docstring).

    Made and read flat as docs/types.md lists them, or by group:
    ``LoaderOptions(num_workers=2)`` is ``LoaderOptions(workers=WorkerOptions(
    num_workers=2))``, and ``options.num_workers`` is ``options.workers.num_workers``.
    """

    # the flat names, in docs/types.md's groups' order
    OPTION_NAMES: ClassVar[tuple[str, ...]] = tuple(_GROUP_OF)
    GROUPS: ClassVar[Mapping[str, type[_Frozen]]] = _GROUPS

    source: SourceOptions = SourceOptions()
    device_feed: DeviceOptions = DeviceOptions()
    workers: WorkerOptions = WorkerOptions()

    if TYPE_CHECKING:  # the flat keywords too, for type checkers and editors

        def __init__(
            self, /, *, source: SourceOptions = ..., device_feed: DeviceOptions = ...,
            workers: WorkerOptions = ..., **options: Unpack[OptionKeywords],
        ) -> None: ...

    @model_validator(mode="before")
    @classmethod
    def _flat_keywords(cls, data: Any) -> Any:
        return _route(data) if isinstance(data, dict) else data

    def merged(self, **overrides: Any) -> Self:
        """A copy with ``overrides`` (flat option names) applied and validated.

        Every value given wins, ``0``, ``False`` and ``None`` included; an unknown name
        or a bad value is :class:`InvalidConfig` naming the option.
        """
        unknown = sorted(set(overrides) - set(_GROUP_OF))
        if unknown:
            name = unknown[0]
            msg = f"unknown loader option {name!r}{_close(name)}; the options are " + \
                  ", ".join(_GROUP_OF)
            raise InvalidConfig(msg, details={"option": name})
        update: dict[str, Any] = {}
        for group, model in _GROUPS.items():
            mine = {k: v for k, v in overrides.items() if _GROUP_OF[k] == group}
            if mine:
                update[group] = model(**{**getattr(self, group).model_dump(), **mine})
        return super().model_copy(update=update) if update else self

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Self:
        """pydantic's copy; a flat option name in ``update`` goes through :meth:`merged`
        (routed into its group and validated), never into a field that does not exist."""
        rest = dict(update or {})
        flat = {k: rest.pop(k) for k in list(rest) if k in _GROUP_OF}
        copy = super().model_copy(update=rest, deep=deep)
        return copy.merged(**flat) if flat else copy

    @property
    def read_ahead(self) -> int:
        """Batches ``plan.loader`` holds ready: ``prefetch_factor * max(1, num_workers)``."""
        return self.workers.read_ahead

    # the flat names of docs/types.md, read-only
    @property
    def data_access(self) -> DataAccess:
        """``source.data_access``."""
        return self.source.data_access

    @property
    def transport(self) -> Transport:
        """``source.transport``."""
        return self.source.transport

    @property
    def input_valid(self) -> bool:
        """``source.input_valid``."""
        return self.source.input_valid

    @property
    def device(self) -> str:
        """``device_feed.device``."""
        return self.device_feed.device

    @property
    def pin_memory(self) -> bool | None:
        """``device_feed.pin_memory``."""
        return self.device_feed.pin_memory

    @property
    def prefetch_to_device(self) -> bool | None:
        """``device_feed.prefetch_to_device``."""
        return self.device_feed.prefetch_to_device

    @property
    def non_blocking(self) -> bool:
        """``device_feed.non_blocking``."""
        return self.device_feed.non_blocking

    @property
    def num_workers(self) -> int:
        """``workers.num_workers``."""
        return self.workers.num_workers

    @property
    def prefetch_factor(self) -> int:
        """``workers.prefetch_factor``."""
        return self.workers.prefetch_factor

    @property
    def persistent_workers(self) -> bool:
        """``workers.persistent_workers``."""
        return self.workers.persistent_workers

    @property
    def multiprocessing_context(self) -> StartMethod | None:
        """``workers.multiprocessing_context``."""
        return self.workers.multiprocessing_context
