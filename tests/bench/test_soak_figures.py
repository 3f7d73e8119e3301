"""The soak's resource figures from samples: growth is the trend after warm-up, not
the fill of a process's first minutes nor the difference of two noisy samples."""

from __future__ import annotations

from typing import Any

from bench.soak.figures import _resources

MIB = 1 << 20


def _incarnation(start: float, rss_mib: list[float], *, every_s: float = 60.0,
                 shared_mib: float = 100.0) -> dict[str, Any]:
    return {"started_at": start, "samples": [
        {"at": start + every_s * (n + 1), "rss": int(r * MIB), "shared": int(shared_mib * MIB),
         "fds": 20} for n, r in enumerate(rss_mib)]}


def test_growth_is_the_slope_after_warm_up_of_the_longest_run() -> None:
    filling = [150.0, 200.0]  # the first minutes: caches and arenas fill
    flat = [250.0, 252.0, 249.0, 251.0, 250.0, 251.0, 249.0, 250.0]  # noise, no trend
    leaking = [250.0 + 2.5 * n for n in range(8)]  # 2.5 MiB a minute: 60 %/h of 250
    fig = _resources({"flat": [_incarnation(0.0, filling + flat)],
                      "leaking": [_incarnation(0.0, [100.0]),  # a short first run
                                  _incarnation(1000.0, filling + leaking)]},
                     warmup_s=180.0)
    assert fig["flat"]["rss_start_mib"] == 250
    assert abs(fig["flat"]["rss_growth_pct_per_hour"]) < 5.0
    assert fig["flat"]["anon_start_mib"] == 150
    assert fig["leaking"]["incarnations"] == 2
    assert fig["leaking"]["rss_growth_pct_per_hour"] == 60.0
    assert fig["leaking"]["measured_s"] == 420.0


def test_a_run_shorter_than_its_warm_up_has_no_growth() -> None:
    fig = _resources({"young": [_incarnation(0.0, [100.0, 120.0])]}, warmup_s=180.0)
    assert fig["young"]["rss_end_mib"] == 120
    assert fig["young"]["rss_growth_pct_per_hour"] is None
