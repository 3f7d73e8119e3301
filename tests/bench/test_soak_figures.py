"""The soak's resource figures from samples: growth is the trend after warm-up, not
the fill of a process's first minutes nor the difference of two noisy samples."""

from __future__ import annotations

from typing import Any

from bench.soak.faults import CONTROLS, _victims
from bench.soak.figures import _resources, rss_over

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


def test_anon_growth_is_the_slope_of_what_no_file_backs() -> None:
    # RSS grows only by mapped file pages (a tier filling): anonymous memory is flat
    inc = {"started_at": 0.0, "samples": [
        {"at": 60.0 * (n + 4), "rss": int((300 + 2 * n) * MIB),
         "shared": int((100 + 2 * n) * MIB), "fds": 20} for n in range(10)]}
    fig = _resources({"reader": [inc]}, warmup_s=180.0)
    assert fig["reader"]["rss_growth_pct_per_hour"] == 40.0  # 2 MiB a minute of 300
    assert fig["reader"]["anon_growth_pct_per_hour"] == 0.0


def test_only_long_runs_are_held_to_the_growth_bound() -> None:
    minutes = 30
    leaking = [250.0 + 0.5 * n for n in range(minutes)]  # 30 MiB/h of 250: 12 %/h
    fig = _resources({"long": [_incarnation(0.0, [200.0, 200.0, *leaking])],
                      "short": [_incarnation(0.0, [200.0, 200.0, *leaking[:10]])],
                      "flat": [_incarnation(0.0, [200.0] * (minutes + 2))]},
                     warmup_s=180.0)
    assert fig["short"]["rss_growth_pct_per_hour"] == 12.0
    assert rss_over(fig) == ["long"]


def test_faults_spare_the_controls_while_another_of_their_kind_is_there() -> None:
    flights = ["flight-1", "flight-2", "flight-3"]
    assert "flight-3" in CONTROLS
    assert _victims(flights) == ["flight-1", "flight-2"]
    assert _victims(["client-flight", "client-local"]) == ["client-flight", "client-local"]
