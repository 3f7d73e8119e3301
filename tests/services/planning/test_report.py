"""The plan report, and the reference's batch values (used by the Flight tests)."""

from __future__ import annotations

import json

import numpy as np

from tests.reference.schedule_ref import (
    RefBatch,
    RefStream,
    reference_schedule,
    reference_values,
)
from windpipe.services.contract.configs import LoaderConfig, ScalingSpec, WindowConfig
from windpipe.services.planning.report import PADDING_WARNING_SHARE, plan_report
from windpipe.services.planning.strategies import epoch_schedule
from windpipe.services.planning.streams import Streams


def streams_of(ns: list[int], protos: list[str]) -> Streams:
    return Streams.from_pieces(
        protocols=tuple(sorted(set(protos))), stream_protocols=protos,
        group_keys=[("s", "c", i, p) for i, p in enumerate(protos)],
        alignment_keys=[("s", "c", i) for i in range(len(ns))],
        pieces=[[(f"p{i}", i, n)] for i, n in enumerate(ns)],
    )


def test_report_numbers() -> None:
    streams = streams_of([13, 1, 9], ["cycling", "cycling", "hppc"])
    cfg = LoaderConfig(
        inputs={"cycling": ("v", "i"), "hppc": ("v",)}, targets={"cycling": ("v",), "hppc": ("v",)},
        default_window=WindowConfig(batch_size=3, seq_len=4),
        window_by_protocol={"hppc": WindowConfig(batch_size=2, seq_len=2)},
    )
    sched = epoch_schedule(streams, cfg, 0)
    rep = plan_report(streams, cfg, sched, world_size=2)
    assert json.loads(rep.model_dump_json()) == rep.model_dump(mode="json")
    assert "aligned" not in rep.model_dump(mode="json")  # only an aligned plan has it
    # cycling N=13: one batch, lanes at 0, 4, 8 (real targets 4, 4, 4);
    # hppc N=9, B*T=4: windows at 0 (2 lanes) and 4 (lanes 4, 6): real 2+2, 2+2
    assert rep.batches == 3
    assert rep.lanes == 7
    assert rep.tokens == 3 * 4 + 4 * 2
    assert rep.real_tokens == 12 + 8
    assert rep.protocols["cycling"].bytes_per_full_batch == 3 * 4 * (3 * 4 + 1)
    assert rep.bytes == 3 * 4 * 13 + 4 * 2 * (2 * 4 + 1)
    assert rep.batches_per_rank_untrimmed == [2, 1]
    assert rep.batches_per_rank == [1, 1]
    assert rep.dropped.distributed_trimmed_batches == 1
    assert rep.dropped.short_streams == 1
    assert rep.cache_working_set_bytes > 0


def test_padding_over_half_of_a_protocols_tokens_is_warned() -> None:
    streams = streams_of([13, 40, 9], ["cycling", "cycling", "hppc"])
    cfg = LoaderConfig(
        inputs={"cycling": ("v",), "hppc": ("v",)}, targets={"cycling": ("v",), "hppc": ("v",)},
        default_window=WindowConfig(batch_size=2, seq_len=4),
        window_by_protocol={"hppc": WindowConfig(batch_size=2, seq_len=64)},
    )
    rep = plan_report(streams, cfg, epoch_schedule(streams, cfg, 0))
    hppc = rep.protocols["hppc"]
    assert hppc.real_tokens / hppc.tokens < PADDING_WARNING_SHARE  # 8 of 64: one lane
    assert [(w.type, w.protocol) for w in rep.warnings] == [("padding", "hppc")]
    warning = rep.warnings[0]
    assert warning.share == round(1 - hppc.real_tokens / hppc.tokens, 4)
    assert warning.message.startswith("hppc: 88% of the batches' tokens are padding (8 of 64 have")
    assert "windows of 64 steps are longer than most of its streams (median 9 rows)" in (
        warning.message)
    dumped = rep.model_dump(mode="json")
    assert dumped["warnings"][0]["protocol"] == "hppc"
    calm = plan_report(streams, cfg.model_copy(update={"window_by_protocol": {}}),
                       epoch_schedule(streams, cfg.model_copy(update={"window_by_protocol": {}}),
                                      0))
    assert calm.warnings == []
    assert "warnings" not in calm.model_dump(mode="json")


def test_reference_values() -> None:
    cfg = LoaderConfig(
        inputs={"cycling": ("v", "i"), "hppc": ("v",)},
        targets={"cycling": ("v",), "hppc": ("v", "x")},
        default_window=WindowConfig(batch_size=2, seq_len=3),
        strategy="sequential", stateful_n_windows=-1, cross_protocol_state_carry="chain",
        scaling=(ScalingSpec(column="v", input_min=0.0, input_max=10.0, output_min=0.0,
                             output_max=1.0, clip=True),),
    )
    streams = [RefStream("cycling", 4, ("s", "c", 0, "cycling"), ("s", "c", 0)),
               RefStream("hppc", 2, ("s", "c", 0, "hppc"), ("s", "c", 0))]
    data = [
        {"v": np.array([0.0, 5.0, np.nan, 20.0]), "i": np.array([1.0, 2.0, 3.0, 4.0])},
        {"v": np.array([1.0, 2.0]), "x": np.array([7.0, np.nan])},
    ]
    batches = reference_schedule(streams, cfg, 0)
    # one chained segment: cycling's only window (N=4, T=3), then hppc's
    assert [b.lanes for b in batches] == [((0, 0),), ((1, 0),)]
    assert [(b.step, b.steps, b.lane_protocols) for b in batches] == [
        (0, 2, ("cycling",)), (1, 2, ("hppc",))]
    inputs, targets, mask = reference_values(batches[0], streams, data, cfg)
    assert inputs.shape == (1, 3, 2)
    assert inputs[0, :, 0].tolist() == [0.0, 0.5, -2.0]
    assert inputs[0, :, 1].tolist() == [1.0, 2.0, 3.0]
    assert np.isnan(targets[0, 1, 0])
    assert targets[0, 2, 0] == 1.0
    assert np.isnan(targets[0, :, 1]).all()  # cycling lacks target "x"
    assert mask.tolist() == [[True, True, True]]
    inputs, targets, mask = reference_values(batches[1], streams, data, cfg)
    assert inputs[0, :, 1].tolist() == [-2.0, -2.0, -2.0]  # hppc lacks input "i"
    assert mask.tolist() == [[True, False, False]]
    assert targets[0, 0, 1] != targets[0, 0, 1]  # null target -> NaN
    pad = RefBatch(lanes=(None,), lane_streams=(0,), lane_protocols=("cycling",), seq_len=3,
                   protocol="cycling", unit=0)
    inputs, targets, mask = reference_values(pad, streams, data, cfg)
    assert (inputs == -2.0).all()
    assert np.isnan(targets).all()
    assert not mask.any()
