"""The user-facing configuration types of ``docs/types.md``.

One definition serves the SDK, the catalog and the Flight server, so a config that
validates in a notebook validates identically on the server. Every type is an
immutable pydantic model that checks itself on construction: a bad config fails
where it is written, not one batch into training.

Checks that need the data (unknown columns, non-numeric columns, unknown split
names) happen when the catalog plans; everything decidable from the config alone
happens here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from windpipe.services.contract.frozen import Frozen as _Frozen
from windpipe.services.contract.frozen import freeze as _freeze
from windpipe.services.contract.options import (
    DATA_ACCESS_MODES,
    TRANSPORTS,
    DataAccess,
    DeviceOptions,
    LoaderOptions,
    SourceOptions,
    Transport,
    WorkerOptions,
)
from windpipe.services.contract.scaling import ScalingSpec

if TYPE_CHECKING:
    from typing import Unpack

    from windpipe.services.contract.options import OptionKeywords

__all__ = [
    "DATA_ACCESS_MODES",
    "DEFAULT_ALIGNMENT_KEY",
    "DEFAULT_GROUP_BY",
    "DEFAULT_GROUP_KEY",
    "IDENTITY_COLUMNS",
    "TRANSPORTS",
    "DataAccess",
    "DatasetProtocolId",
    "DeviceOptions",
    "LoaderConfig",
    "LoaderOptions",
    "PlanSpec",
    "ScalingSpec",
    "Selector",
    "SourceOptions",
    "Transport",
    "ValidationConfig",
    "WindowConfig",
    "WorkerOptions",
]

IDENTITY_COLUMNS: tuple[str, str, str, str] = ("set_id", "cell_id", "cidx", "protocol")
DEFAULT_GROUP_BY: tuple[str, ...] = ("set_id", "cell_id", "cidx")
DEFAULT_GROUP_KEY: tuple[str, ...] = ("set_id", "cell_id", "cidx", "protocol")
DEFAULT_ALIGNMENT_KEY: tuple[str, ...] = ("set_id", "cell_id", "cidx")

Selector = dict[str, str | int | float | bool]

class DatasetProtocolId(StrEnum):
    """Built-in protocols; any lower-case name is accepted wherever a protocol is."""

    CYCLING = "cycling"
    HPPC = "hppc"
    EIS = "eis"
    OCV = "ocv"  # open-circuit rests: a BioLogic OCV file ingests to it (current 0 A)


def _protocol_name(value: object) -> str:
    name = str(value.value if isinstance(value, DatasetProtocolId) else value)
    if not name or name != name.strip() or name.lower() != name:
        msg = f"protocol names are non-empty lower-case strings, got {value!r}"
        raise ValueError(msg)
    return name


def _unset(value: object) -> bool:
    """An optional field left None is not written: a spec without a field added later
    dumps (and digests: plan ids) exactly as before it existed."""
    return value is None


def _column_tuple(value: Any, *, what: str, allow_empty: bool = False) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    cols = tuple(value)
    if not cols and not allow_empty:
        msg = f"{what} must name at least one column"
        raise ValueError(msg)
    for col in cols:
        if not isinstance(col, str) or not col:
            msg = f"{what}: column names are non-empty strings, got {col!r}"
            raise ValueError(msg)
    if len(set(cols)) != len(cols):
        msg = f"{what} names a column twice: {cols}"
        raise ValueError(msg)
    return cols


class ValidationConfig(_Frozen):
    """How a dataset version is split into ``train`` and ``val`` (SEMANTICS section 2)."""

    strategy: Literal["sample", "provide", "merge"]
    fraction: float = Field(default=0.2, ge=0.0, le=1.0)
    seed: int = 69
    group_by: tuple[str, ...] = DEFAULT_GROUP_BY
    provided: tuple[Selector, ...] = ()

    @field_validator("group_by", mode="before")
    @classmethod
    def _group_by(cls, value: Any) -> tuple[str, ...]:
        return _column_tuple(value, what="group_by")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.strategy in ("provide", "merge") and not self.provided:
            msg = f"strategy {self.strategy!r} needs at least one selector in 'provided'"
            raise ValueError(msg)
        if self.strategy == "sample" and self.provided:
            msg = "strategy 'sample' takes no selectors; use merge() to combine both"
            raise ValueError(msg)
        for selector in self.provided:
            if not selector:
                msg = "an empty selector would match every group"
                raise ValueError(msg)
        _freeze(self, "provided")
        return self

    @classmethod
    def sample(
        cls, fraction: float = 0.2, seed: int = 69, *, group_by: tuple[str, ...] = DEFAULT_GROUP_BY
    ) -> ValidationConfig:
        """Hold out each group with probability ``fraction``, decided by a hash of the group."""
        return cls(strategy="sample", fraction=fraction, seed=seed, group_by=group_by)

    @classmethod
    def provide(
        cls, provided: tuple[Selector, ...] | list[Selector], *,
        group_by: tuple[str, ...] = DEFAULT_GROUP_BY,
    ) -> ValidationConfig:
        """Hold out exactly the groups that a selector matches."""
        return cls(strategy="provide", provided=tuple(provided), group_by=group_by)

    @classmethod
    def merge(
        cls, provided: tuple[Selector, ...] | list[Selector], fraction: float = 0.2,
        seed: int = 69, *, group_by: tuple[str, ...] = DEFAULT_GROUP_BY,
    ) -> ValidationConfig:
        """Hold out the provided groups and a sampled fraction of the rest."""
        return cls(
            strategy="merge", provided=tuple(provided), fraction=fraction, seed=seed,
            group_by=group_by,
        )


class WindowConfig(_Frozen):
    """Batch shape of one protocol: ``batch_size`` lanes of ``seq_len`` rows."""

    batch_size: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    drop_incomplete: bool = False
    step_rows: int | None = Field(default=None, ge=1)

    @property
    def window_rows(self) -> int:
        """Rows one plain window covers: ``batch_size * seq_len``."""
        return self.batch_size * self.seq_len

    @property
    def step(self) -> int:
        """Distance between the starts of consecutive plain windows."""
        return self.step_rows if self.step_rows is not None else self.window_rows


class PlanSpec(_Frozen):
    """What identifies a plan (SEMANTICS sections 3 to 7): the body of ``POST .../plans``.

    The planning fields of ``LoaderConfig``; a plan's id digests them and the split's
    id, so they (and nothing else) decide every batch. Runtime options live in
    :class:`LoaderOptions`; a plan body naming one is refused.
    """

    split: str = "train"
    default_window: WindowConfig = WindowConfig(batch_size=8, seq_len=1024)
    window_by_protocol: dict[str, WindowConfig] = Field(default_factory=dict)
    seed: int = 69
    strategy: Literal["sequential", "shuffled", "block_shuffled"] = "sequential"
    # block_shuffled only (SEMANTICS 3c); left out of the JSON when unset, so plans made
    # before it existed keep their ids
    shuffle_block_bytes: int | None = Field(default=None, ge=1, exclude_if=_unset)
    phase_shift: bool = True
    protocol_order: tuple[str, ...] | None = None
    stateful_n_windows: int = Field(default=0, ge=-1)
    cross_protocol_state_carry: Literal["chain"] | None = None
    drop_incomplete_batches: bool = False
    drop_incomplete_distributed: bool = True
    group_key: tuple[str, ...] = DEFAULT_GROUP_KEY
    alignment_key: tuple[str, ...] = DEFAULT_ALIGNMENT_KEY
    align_by: Literal["alignment_key"] | None = None
    inputs: dict[str, tuple[str, ...]]
    targets: dict[str, tuple[str, ...]]
    scaling: tuple[ScalingSpec, ...] = ()

    @field_validator("window_by_protocol", mode="before")
    @classmethod
    def _window_keys(cls, value: Any) -> dict[str, Any]:
        return {_protocol_name(k): v for k, v in dict(value).items()}

    @field_validator("inputs", "targets", mode="before")
    @classmethod
    def _column_map(cls, value: Any) -> dict[str, tuple[str, ...]]:
        return {
            _protocol_name(k): _column_tuple(v, what=f"columns of {_protocol_name(k)!r}")
            for k, v in dict(value).items()
        }

    @field_validator("protocol_order", mode="before")
    @classmethod
    def _order(cls, value: Any) -> tuple[str, ...] | None:
        if value is None:
            return None
        return tuple(_protocol_name(v) for v in value)

    @field_validator("group_key", "alignment_key", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> tuple[str, ...]:
        return _column_tuple(value, what="key")

    @model_validator(mode="after")
    def _check_plan(self) -> Self:
        if not self.inputs:
            msg = "inputs must name at least one protocol"
            raise ValueError(msg)
        if set(self.targets) != set(self.inputs):
            msg = (
                "targets must name exactly the protocols of inputs: "
                f"inputs {sorted(self.inputs)}, targets {sorted(self.targets)}"
            )
            raise ValueError(msg)
        if self.protocol_order is not None and (
            sorted(self.protocol_order) != sorted(self.inputs)
            or len(set(self.protocol_order)) != len(self.protocol_order)
        ):
            msg = (
                f"protocol_order {list(self.protocol_order)} must list exactly the protocols "
                f"of inputs {sorted(self.inputs)}, each once"
            )
            raise ValueError(msg)
        extra = sorted(set(self.window_by_protocol) - set(self.inputs))
        if extra:
            msg = f"window_by_protocol names protocols that are not in inputs: {extra}"
            raise ValueError(msg)
        columns = [s.column for s in self.scaling]
        if len(set(columns)) != len(columns):
            msg = f"scaling names a column twice: {columns}"
            raise ValueError(msg)
        unknown = sorted(set(columns) - set(self.columns()))
        if unknown:
            msg = f"scaling names columns that are neither inputs nor targets: {unknown}"
            raise ValueError(msg)
        if self.cross_protocol_state_carry == "chain":
            self._check_chain()
        if self.align_by is not None:
            self._check_aligned()
        self._check_block_shuffle()
        _freeze(self, "inputs", "targets", "window_by_protocol")
        return self

    def _check_chain(self) -> None:
        if self.stateful_n_windows == 0:
            msg = "cross_protocol_state_carry='chain' carries recurrent state: it needs " \
                  "stateful_n_windows != 0"
            raise ValueError(msg)
        shapes = {(w.batch_size, w.seq_len) for w in map(self.window_for, self.inputs)}
        if len(shapes) != 1:
            msg = "chained protocols must share batch_size and seq_len, got " + ", ".join(
                f"{p}: {self.window_for(p).batch_size}x{self.window_for(p).seq_len}"
                for p in self.ordered_protocols()
            )
            raise ValueError(msg)
        missing = [k for k in self.alignment_key if k not in self.group_key]
        if missing:
            msg = f"chain: alignment_key columns {missing} must be part of group_key"
            raise ValueError(msg)

    def _check_aligned(self) -> None:
        if self.stateful_n_windows != 0 or self.cross_protocol_state_carry is not None:
            msg = ("align_by batches every protocol of B alignment keys side by side: it needs "
                   "stateful_n_windows=0 and no cross_protocol_state_carry")
            raise ValueError(msg)
        sizes = {self.window_for(p).batch_size for p in self.inputs}
        if len(sizes) != 1:
            msg = "align_by needs one batch_size for every protocol, got " + ", ".join(
                f"{p}: {self.window_for(p).batch_size}" for p in self.ordered_protocols())
            raise ValueError(msg)
        if any(self.window_for(p).step_rows is not None for p in self.inputs):
            msg = "align_by reads each key's windows back to back: step_rows does not apply"
            raise ValueError(msg)

    def _check_block_shuffle(self) -> None:
        if self.strategy != "block_shuffled":
            if self.shuffle_block_bytes is not None:
                msg = ("shuffle_block_bytes is the block budget of strategy='block_shuffled'; "
                       f"strategy {self.strategy!r} does not use it")
                raise ValueError(msg)
            return
        if self.shuffle_block_bytes is None:
            msg = ("strategy='block_shuffled' needs shuffle_block_bytes: the decoded bytes "
                   "one shuffle block may read (SEMANTICS 3c)")
            raise ValueError(msg)
        if self.stateful_n_windows != 0 or self.align_by is not None:
            msg = ("strategy='block_shuffled' shuffles single lane windows within blocks: it "
                   "needs stateful_n_windows=0 (no cross_protocol_state_carry) and no align_by")
            raise ValueError(msg)

    @property
    def aligned(self) -> bool:
        """Whether batches align protocols by key (SEMANTICS section 9)."""
        return self.align_by is not None

    def window_for(self, protocol: str | DatasetProtocolId) -> WindowConfig:
        """The window of ``protocol``: its own entry, else ``default_window``."""
        return self.window_by_protocol.get(_protocol_name(protocol), self.default_window)

    def ordered_protocols(self) -> tuple[str, ...]:
        """The plan's protocols: ``protocol_order`` when given, else sorted names."""
        return self.protocol_order if self.protocol_order is not None else tuple(
            sorted(self.inputs)
        )

    def plan_spec(self) -> PlanSpec:
        """Just the planning fields (a :class:`LoaderConfig` drops its runtime options)."""
        if type(self) is PlanSpec:
            return self
        return PlanSpec.model_validate(self.model_dump(include=set(PlanSpec.model_fields)))

    def planning_dict(self) -> dict[str, Any]:
        """The planning fields as JSON-ready data: what defines a plan (the REST body)."""
        return self.model_dump(mode="json", include=set(PlanSpec.model_fields))

    def columns(self) -> tuple[str, ...]:
        """Every source column the plan reads (inputs and targets of all protocols), sorted."""
        return tuple(sorted({
            c for cols in (*self.inputs.values(), *self.targets.values()) for c in cols
        }))

    def input_columns(self, protocol: str) -> tuple[str, ...]:
        """Input channels of a batch of ``protocol`` (the chained union under chain)."""
        return self._channels(protocol, self.inputs)

    def target_columns(self, protocol: str) -> tuple[str, ...]:
        """Target channels of a batch of ``protocol`` (the chained union under chain)."""
        return self._channels(protocol, self.targets)

    def _channels(self, protocol: str, table: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
        if self.cross_protocol_state_carry != "chain":
            return table[_protocol_name(protocol)]
        seen: dict[str, None] = {}
        for p in self.ordered_protocols():
            for col in table[p]:
                seen.setdefault(col, None)
        return tuple(seen)

    def scaling_for(self, column: str) -> ScalingSpec | None:
        """The scaling of ``column``, if any."""
        return next((s for s in self.scaling if s.column == column), None)


class LoaderConfig(LoaderOptions, PlanSpec):
    """What to stream and how: the user's entry point (TYPES ``LoaderConfig``).

    The planning fields (:class:`PlanSpec`) define a plan's identity; the runtime
    options (:class:`LoaderOptions`: the groups ``source``, ``device_feed`` and
    ``workers``) only steer the SDK and never change a batch. The options are written
    and read flat as TYPES lists them (``LoaderConfig(..., num_workers=2)``,
    ``config.num_workers``) or by group. :meth:`plan_spec` and :meth:`options` split
    one into the other.
    """

    PLANNING_FIELDS: ClassVar[tuple[str, ...]] = tuple(PlanSpec.model_fields)
    RUNTIME_FIELDS: ClassVar[tuple[str, ...]] = LoaderOptions.OPTION_NAMES

    if TYPE_CHECKING:  # the planning fields, the groups and the flat option keywords

        def __init__(
            self, /, *,
            split: str = ...,
            default_window: WindowConfig = ...,
            window_by_protocol: dict[str, WindowConfig] = ...,
            seed: int = ...,
            strategy: Literal["sequential", "shuffled", "block_shuffled"] = ...,
            shuffle_block_bytes: int | None = ...,
            phase_shift: bool = ...,
            protocol_order: tuple[str, ...] | None = ...,
            stateful_n_windows: int = ...,
            cross_protocol_state_carry: Literal["chain"] | None = ...,
            drop_incomplete_batches: bool = ...,
            drop_incomplete_distributed: bool = ...,
            group_key: tuple[str, ...] = ...,
            alignment_key: tuple[str, ...] = ...,
            align_by: Literal["alignment_key"] | None = ...,
            inputs: dict[str, tuple[str, ...]],
            targets: dict[str, tuple[str, ...]],
            scaling: tuple[ScalingSpec, ...] = ...,
            source: SourceOptions = ...,
            device_feed: DeviceOptions = ...,
            workers: WorkerOptions = ...,
            **options: Unpack[OptionKeywords],
        ) -> None: ...

    def options(self) -> LoaderOptions:
        """Just the runtime options."""
        return LoaderOptions(**{g: getattr(self, g) for g in LoaderOptions.GROUPS})
