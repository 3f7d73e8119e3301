"""A notebook outside the deployment's network: the servers advertise names it cannot
resolve; the error names them, and a client-side location map reaches them."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.servers import free_ports, run_catalog_server
from windpipe import sdk
from windpipe._serving import serve_flight
from windpipe.sdk import Catalog, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.sdk._locations import LocationMap
from windpipe.services.settings import Settings

CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=4, seq_len=32),
    inputs={"cycling": ("current_a",)}, targets={"cycling": ("voltage_v",)},
    transport="flight",
)


def test_the_map_rewrites_whole_locations_host_port_or_host(monkeypatch):
    m = LocationMap({"grpc://a:1": "grpc://x:9", "b:2": "localhost:7", "c": "127.0.0.1"})
    assert m("grpc://a:1") == "grpc://x:9"
    assert m("grpc://b:2") == "grpc://localhost:7"
    assert m("grpc://c:8815") == "grpc://127.0.0.1:8815"
    assert m("grpc://d:1") == "grpc://d:1"
    monkeypatch.setenv("WINDPIPE_FLIGHT_LOCATION_MAP", "flight-a:8815=localhost:8815, e=f")
    env = LocationMap()
    assert env("grpc://flight-a:8815") == "grpc://localhost:8815"
    assert env("grpc+tcp://e:5") == "grpc+tcp://f:5"
    monkeypatch.setenv("WINDPIPE_FLIGHT_LOCATION_MAP", "nonsense")
    with pytest.raises(sdk.InvalidConfig, match="FROM=TO"):
        LocationMap()


def test_unreachable_names_are_named_and_a_map_reaches_them(
    tmp_path: Path, synth_dataset: Any, monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("WINDPIPE_FLIGHT_LOCATION_MAP", raising=False)
    (port,) = free_ports(1)
    advertised = f"grpc://windpipe-flight-a.invalid:{port}"
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'c.db'}", data_dir=tmp_path / "state",
        flight_host="127.0.0.1", flight_locations=(advertised,),
        flight_public_location=advertised, tier_bytes=0, log_level="WARNING",
    )
    with ExitStack() as stack:
        url = stack.enter_context(run_catalog_server(settings))
        running = serve_flight(settings, port=port)
        stack.callback(running.stop, grace_s=5.0)
        cat = Catalog(url, timeout=10)
        ver = cat.register("demo", root=synth_dataset.path.resolve().as_uri(),
                           manifest="manifest.parquet")
        plan = ver.split(ValidationConfig.sample(fraction=0.2, seed=1)).plan(CONFIG)
        with pytest.raises(sdk.Unavailable) as info:
            next(iter(plan.batches()))
        assert "windpipe-flight-a.invalid" in info.value.message
        assert "location_map" in info.value.message
        cat.close()
        mapped = Catalog(url, timeout=10,
                         location_map={"windpipe-flight-a.invalid": "127.0.0.1"})
        batches = list(mapped.plan(plan.id).batches())
        assert len(batches) == plan.n_batches
        assert mapped.flight().locations == [f"grpc://127.0.0.1:{port}"]
        mapped.close()


def test_the_documented_compose_map_reaches_every_published_flight_server():
    import yaml  # noqa: PLC0415

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    line = next(ln for ln in readme.splitlines()
                if ln.startswith("export WINDPIPE_FLIGHT_LOCATION_MAP="))
    mapping = LocationMap(dict(
        pair.split("=", 1) for pair in line.split("=", 1)[1].strip('"').split(",")))
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    flights = {name: svc for name, svc in compose["services"].items()
               if "flight" in (svc.get("command") or [])}
    assert len(flights) >= 2
    for name, svc in flights.items():
        advertised = svc["environment"]["WINDPIPE_FLIGHT_PUBLIC_LOCATION"]
        published = svc["ports"][0].split(":")[0]
        assert mapping(advertised) == f"grpc://localhost:{published}", name
