"""Throughput statistics of one pass through a loader, with a one-line verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from windpipe.sdk._html import html_table, human_bytes, human_count, text_table
from windpipe.sdk._plots import plot_loader_stats

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["LoaderStats"]

_INPUT_BOUND = 0.25


@dataclass(repr=False)
class LoaderStats:
    """What one pass measured (``repr``: a readable table; ``_repr_html_`` in a notebook).

    ``server_wait_s``: time the reader thread spent waiting for the next batch from
    the stream (network + server). ``consumer_wait_s``: time the consumer spent
    blocked waiting for a batch. ``consumer_s``: time the consumer spent between
    receiving a batch and asking for the next (its own work). ``timeline``: per batch,
    ``(seconds into the pass, consumer wait in seconds, tokens)`` (:meth:`plot`).
    """

    batches: int = 0
    tokens: int = 0
    bytes: int = 0
    wall_s: float = 0.0
    server_wait_s: float = 0.0
    consumer_wait_s: float = 0.0
    consumer_s: float = 0.0
    h2d_s: float = 0.0
    failovers: int = 0
    pinned_gathers: int = 0
    pinned_copies: int = 0
    device: str = "cpu"
    timeline: list[tuple[float, float, int]] = field(default_factory=list, repr=False)

    @property
    def batches_per_s(self) -> float:
        """Batches per second of wall time."""
        return self.batches / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Tokens (``B * T``) per second of wall time."""
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        """Tensor bytes per second of wall time."""
        return self.bytes / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def input_bound(self) -> bool:
        """True when the consumer waited on data for more than a quarter of the pass."""
        return self.wall_s > 0 and self.consumer_wait_s / self.wall_s > _INPUT_BOUND

    @property
    def verdict(self) -> str:
        """One line saying what limited the pass."""
        if self.batches == 0 or self.wall_s <= 0:
            return "no batches: nothing to judge"
        waited = 100.0 * self.consumer_wait_s / self.wall_s
        busy = 100.0 * self.consumer_s / self.wall_s
        if self.input_bound:
            return (
                f"input-bound: the consumer waited for data {waited:.0f}% of the time "
                f"(reader waited {self.server_wait_s:.2f} s on the server); when a training "
                "step this short is real, more Flight servers, a cache that holds the split "
                "(data_access='full_in_mem') or larger batches help"
            )
        return (
            f"consumer-bound: data was ready in time (consumer waited {waited:.0f}%, "
            f"busy {busy:.0f}%); the loader is not the bottleneck"
        )

    def _rows(self) -> list[tuple[str, object]]:
        pinned: list[tuple[str, object]] = []
        if self.pinned_gathers or self.pinned_copies:
            pinned = [("page-locked", f"{self.pinned_gathers} gathered into it, "
                                      f"{self.pinned_copies} copied into it")]
        return [
            ("device", self.device),
            ("batches", f"{self.batches} ({self.batches_per_s:.1f}/s)"),
            ("tokens", f"{human_count(self.tokens)} ({human_count(self.tokens_per_s)}/s)"),
            ("bytes", f"{human_bytes(self.bytes)} ({human_bytes(self.bytes_per_s)}/s)"),
            ("wall", f"{self.wall_s:.3f} s"),
            ("waiting on the server", f"{self.server_wait_s:.3f} s"),
            ("consumer waiting for data", f"{self.consumer_wait_s:.3f} s"),
            ("in the consumer", f"{self.consumer_s:.3f} s"),
            ("failovers", self.failovers),
            *pinned,
            ("verdict", self.verdict),
        ]

    def plot(self) -> Figure:
        """Throughput and the consumer's waits over the pass (needs ``windpipe[plot]``)."""
        return plot_loader_stats(self)

    def __repr__(self) -> str:
        return text_table("LoaderStats", self._rows())

    def __str__(self) -> str:
        return self.__repr__()

    def _repr_html_(self) -> str:
        return html_table("LoaderStats", self._rows())
