"""A ``tf.data.Dataset`` over a plan: the torch path's batches, byte for byte, for TensorFlow.

``plan.tf_dataset(epoch, rank=, world_size=)`` (``windpipe.tf``) is a
:class:`WindpipeTFDataset`: one rank's pass over a plan, read as numpy arrays
(``windpipe.sdk._arrays``, no torch) and handed to ``tf.data.Dataset.from_generator`` with an
exact ``output_signature`` (:func:`element_signature`): a dict with ``Batch``'s fields
(``inputs``, ``targets``, ``mask``, ``target_valid``, ``has_channel``, ``batch_idx``,
``input_valid`` when asked for), or for an aligned plan each field a dict by protocol
plus ``has_data``. The lane count is ``None`` (a stream's last batch may have fewer
lanes); a plain plan over protocols of different windows or channels has ``None``
there too. TensorFlow is imported on first use, so ``import windpipe.tf`` is cheap, and
without TensorFlow the first use raises :class:`TensorFlowMissing` saying what to install.

Epochs and resumption are the torch dataset's (``windpipe.sdk._torch``):

* ``set_epoch(e)`` selects the epoch the next pass streams (shuffled plans differ per
  epoch); :meth:`WindpipeTFDataset.dataset` is the ``tf.data.Dataset`` of the pass
  selected then, its cardinality that pass's batch count. Each iteration of it streams
  the pass selected at that time, and must have that count: epochs of a shuffled plan
  may differ in length (SEMANTICS 3b), and Keras fixes an epoch's steps once per
  ``fit``, which would cut a longer epoch short. So train one epoch per ``fit``
  (``initial_epoch=e, epochs=e + 1`` over ``ds.dataset()`` after ``set_epoch(e)``); a
  pass of another length raises :class:`InvalidConfig` rather than be cut;
* ``state_dict()`` is ``{"plan_id", "epoch", "batch"}``, ``batch`` the rank-local index
  of the next batch to consume, and ``load_state_dict(sd)`` makes the next pass yield
  exactly the rest of that epoch. The resume point holds until a pass has run to its end
  (Keras reads a first batch of a fresh iterator before training; that must not use it
  up). tf.data reads ahead, so the cursor is taken where batches are consumed: iterating
  the :class:`WindpipeTFDataset` itself, or through :meth:`WindpipeTFDataset.keras_callback`
  in ``model.fit`` (which also calls ``set_epoch`` with Keras' epoch); otherwise pass the
  last element consumed, ``state_dict(after=element)``. A plain ``state_dict()`` that
  cannot know raises :class:`InvalidConfig`, never a wrong cursor.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from windpipe.sdk._arrays import array_batches, batch_fields
from windpipe.sdk._exceptions import InvalidConfig
from windpipe.services.contract.configs import PlanSpec
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.contract.extras import install_hint
from windpipe.services.contract.ranks import check_rank

if TYPE_CHECKING:
    from collections.abc import Callable

    from windpipe.sdk._sources import BatchSource

__all__ = ["TF_HINT", "TensorFlowMissing", "WindpipeTFDataset", "element_signature",
           "for_keras", "require_tf"]

TF_HINT = f"windpipe's TensorFlow datasets need TensorFlow: {install_hint('tf')}"


class TensorFlowMissing(ModuleNotFoundError):  # noqa: N818 - an ImportError, named as one
    """TensorFlow cannot be imported, and what was asked for needs it."""


def require_tf() -> ModuleType:
    """The ``tensorflow`` module, or :class:`TensorFlowMissing` saying how to install it."""
    loaded = sys.modules.get("tensorflow")
    if loaded is not None:
        return loaded
    try:
        return importlib.import_module("tensorflow")
    except ImportError as exc:
        raise TensorFlowMissing(f"{TF_HINT} ({exc})", name="tensorflow") from exc


def _shapes(config: PlanSpec, protocol: str, *, input_valid: bool) -> dict[str, tuple[int, ...]]:
    """The shape of each field of a batch of ``protocol``, lanes left out."""
    t = config.window_for(protocol).seq_len
    ins, outs = config.input_columns(protocol), config.target_columns(protocol)
    shapes = {"inputs": (t, len(ins)), "targets": (t, len(outs)), "mask": (t,),
              "target_valid": (t,), "has_channel": (len(dict.fromkeys((*ins, *outs))),)}
    if input_valid:
        shapes["input_valid"] = (t, len(ins))
    return shapes


_FLOATS = ("inputs", "targets")


def element_signature(config: PlanSpec, *, input_valid: bool = False) -> dict[str, Any]:
    """The ``output_signature`` of a plan's ``tf.data.Dataset`` (see the module docstring):
    ``tf.TensorSpec`` s, ``inputs`` and ``targets`` float32, ``batch_idx`` int64, the
    rest bool; the lane count None, and any other size that differs between the
    protocols of a plain plan."""
    tf = require_tf()

    def spec(name: str, shape: tuple[int | None, ...]) -> Any:
        dtype = tf.float32 if name in _FLOATS else tf.bool
        return tf.TensorSpec(shape=(None, *shape), dtype=dtype)

    protocols = config.ordered_protocols()
    per = {p: _shapes(config, p, input_valid=input_valid) for p in protocols}
    index = tf.TensorSpec(shape=(), dtype=tf.int64)
    if config.aligned:
        out: dict[str, Any] = {name: {p: spec(name, per[p][name]) for p in protocols}
                               for name in per[protocols[0]]}
        out["has_data"] = {p: spec("has_data", ()) for p in protocols}
        out["batch_idx"] = index
        return out
    merged: dict[str, Any] = {}
    for name in per[protocols[0]]:
        sizes = list(zip(*(per[p][name] for p in protocols), strict=True))
        merged[name] = spec(name, tuple(s[0] if len(set(s)) == 1 else None for s in sizes))
    merged["batch_idx"] = index
    return merged


def for_keras(element: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` of an element, for ``model.fit``: ``inputs``; ``targets``
    with 0.0 where ``target_valid`` is False (a null target is NaN there, and a NaN makes
    the loss NaN even at weight 0); ``target_valid`` as float32 weights. An aligned
    plan's element gives a dict by protocol of each (a model with an input and an output
    named by each protocol). ``ds.dataset().map(for_keras)``."""
    tf = require_tf()

    def one(inputs: Any, targets: Any, valid: Any) -> tuple[Any, Any, Any]:
        kept = tf.where(valid[..., None], targets, tf.zeros_like(targets))
        return inputs, kept, tf.cast(valid, tf.float32)

    if isinstance(element["inputs"], Mapping):
        parts = {p: one(x, element["targets"][p], element["target_valid"][p])
                 for p, x in element["inputs"].items()}
        x, y, w = ({p: v[i] for p, v in parts.items()} for i in range(3))
        return x, y, w
    return one(element["inputs"], element["targets"], element["target_valid"])


class WindpipeTFDataset:
    """One rank's passes over a plan for TensorFlow (see the module docstring).

    ``source`` is the plan's :class:`~sdk._sources.BatchSource` (its records are read as
    numpy arrays); ``length(epoch, rank=, world_size=, start_batch=)`` its batch count
    (``Plan.pass_length``). Ranks are keywords, default 0 of 1; every rank gets the
    same number of batches when the plan trims distributed tails (SEMANTICS 7).
    """

    def __init__(
        self,
        source: BatchSource,
        *,
        plan_id: str,
        config: PlanSpec,
        epoch: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        input_valid: bool = False,
        length: Callable[..., int] | None = None,
    ) -> None:
        self._source = source
        self._length = length
        self.plan_id = plan_id
        self.config = config
        self.input_valid = input_valid
        self.epoch = epoch
        self._rank = rank
        self._world_size = world_size
        self._start = 0
        self._cursor = 0
        self._iterating = 0  # __iter__ loops running: they track the cursor
        self._keras = False  # a keras_callback tracks the cursor
        self._tracked = True  # no pass handed out untracked since the cursor was set
        self._error: BaseException | None = None
        self._spec: dict[str, Any] | None = None
        self._rank_world()  # a wrong rank is refused here, not inside TensorFlow

    def __repr__(self) -> str:
        rank, world = self._rank_world()
        return (f"WindpipeTFDataset({self.plan_id!r}, epoch={self.epoch}, rank={rank}, "
                f"world_size={world}, next batch={self._start})")

    @property
    def element_spec(self) -> dict[str, Any]:
        """The ``tf.TensorSpec`` s of one element (:func:`element_signature`)."""
        if self._spec is None:
            self._spec = element_signature(self.config, input_valid=self.input_valid)
        return self._spec

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._rank_world()[0]

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self._rank_world()[1]

    def _rank_world(self) -> tuple[int, int]:
        rank = 0 if self._rank is None else self._rank
        world = 1 if self._world_size is None else self._world_size
        try:
            check_rank(rank, world)
        except WindpipeError as exc:  # the dataset's own settings: a config problem
            raise InvalidConfig(exc.message, details=exc.details) from None
        return rank, world

    def __len__(self) -> int:
        """Batches the next pass yields: the rank's pass of :attr:`epoch` from the resume
        point on (``Plan.pass_length``; Keras' ``steps_per_epoch`` if wanted)."""
        if self._length is None:
            msg = "this dataset's source does not know its batch count"
            raise TypeError(msg)
        rank, world = self._rank_world()
        return self._length(self.epoch, rank=rank, world_size=world, start_batch=self._start)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next pass streams (from its first batch)."""
        if epoch < 0:
            msg = f"epoch must be >= 0, got {epoch}"
            raise InvalidConfig(msg)
        self.epoch = epoch
        self._start = 0
        self._cursor = 0
        self._tracked = True

    def state_dict(self, *, after: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``{"plan_id", "epoch", "batch"}``: where to resume (``after``: the last element
        consumed, whose ``batch_idx`` it reads)."""
        if after is None and not self._tracked:
            msg = ("this dataset's tf.data.Dataset was iterated by something that does not "
                   "report which batch it consumed (tf.data reads ahead): pass the last "
                   "element consumed, ds.state_dict(after=element), iterate the "
                   "WindpipeTFDataset itself, or train with ds.keras_callback()")
            raise InvalidConfig(msg, details={"plan_id": self.plan_id})
        cursor = self._cursor if after is None else int(after["batch_idx"]) + 1
        return {"plan_id": self.plan_id, "epoch": self.epoch, "batch": cursor}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next pass yields the rest of ``state``'s epoch."""
        if state.get("plan_id") != self.plan_id:
            msg = (f"this state belongs to plan {state.get('plan_id')!r}, "
                   f"not to {self.plan_id!r}")
            raise InvalidConfig(msg)
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if epoch < 0 or batch < 0:
            msg = f"invalid state: epoch {epoch}, batch {batch}"
            raise InvalidConfig(msg)
        self.epoch = epoch
        self._start = batch
        self._cursor = batch
        self._tracked = True

    def batches(self) -> Iterator[dict[str, Any]]:
        """The next pass as dicts of numpy arrays (``sdk._arrays.batch_fields``), from the resume
        point on: what the ``tf.data.Dataset`` is made of (it needs no TensorFlow)."""
        return self._batches(None)

    def _batches(self, expected: int | None) -> Iterator[dict[str, Any]]:
        rank, world = self._rank_world()
        epoch, start = self.epoch, self._start
        self._cursor = start
        self._tracked = self._iterating > 0 or self._keras
        self._error = None
        try:
            if expected is not None and len(self) != expected:
                msg = (f"this tf.data.Dataset holds {expected} batches, and the pass now "
                       f"selected (epoch {epoch} from batch {start}) has {len(self)}: epochs "
                       "of a plan may differ in length, and Keras counts an epoch's steps "
                       "once per fit, so make the dataset for the pass, ds.dataset() after "
                       "ds.set_epoch(e), and fit one epoch at a time (docs/sdk.md)")
                raise InvalidConfig(msg, details={"plan_id": self.plan_id, "epoch": epoch})
            records = self._source.records(epoch=epoch, rank=rank, world_size=world,
                                           start_batch=start)
            try:
                yield from map(batch_fields, array_batches(records))
            finally:
                close = getattr(records, "close", None)
                if close is not None:
                    close()
        except Exception as exc:  # TensorFlow reports it as its own error: kept for __iter__
            self._error = exc
            raise
        if (self.epoch, self._start) == (epoch, start):  # a full pass uses the point up
            self._start = 0

    def dataset(self) -> Any:
        """The ``tf.data.Dataset`` of the pass selected now (:attr:`epoch`, from the resume
        point on), its cardinality that pass's batch count (what Keras counts steps by).
        Each iteration of it streams the pass selected then, and one of another length
        raises :class:`InvalidConfig` (Keras would cut it short or stop it), so with
        epochs of differing lengths make one per epoch (see the module docstring)."""
        tf = require_tf()
        expected = None if self._length is None else len(self)
        data = tf.data.Dataset.from_generator(lambda: self._batches(expected),
                                              output_signature=self.element_spec)
        if expected is not None:
            data = data.apply(tf.data.experimental.assert_cardinality(expected))
        return data

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The next pass's elements (eager tensors), tracking the resume cursor."""
        tf = require_tf()
        self._iterating += 1
        try:
            for element in self.dataset():
                self._cursor = int(element["batch_idx"]) + 1
                self._tracked = True
                yield element
        except tf.errors.OpError as exc:
            error, self._error = self._error, None
            if error is not None:  # ours, as it was raised (a typed error)
                raise error from exc
            raise
        finally:
            self._iterating -= 1

    def keras_callback(self) -> Any:
        """A ``keras.callbacks.Callback`` for ``model.fit(ds.dataset(), callbacks=[...])``:
        each Keras epoch streams the plan's epoch of the same number (``set_epoch``; a
        resumed epoch keeps its resume point), and :meth:`state_dict` knows the batch
        the training reached."""
        keras = require_tf().keras
        dataset = self

        class _PassCallback(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
            """Epochs and the resume cursor of a :class:`WindpipeTFDataset` in ``fit``."""

            def __init__(self) -> None:
                super().__init__()
                self.pass_start = 0

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                if epoch != dataset.epoch:
                    dataset.set_epoch(epoch)
                self.pass_start = dataset._start
                dataset._cursor, dataset._tracked = self.pass_start, True

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                dataset._cursor, dataset._tracked = self.pass_start + batch + 1, True

        self._keras = True
        return _PassCallback()
