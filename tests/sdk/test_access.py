"""The SDK with stored tokens end to end: roles and scopes as ``windpipe.sdk.Forbidden``, and a
scoped writer registering, planning and streaming its own dataset over Flight."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.sdk.deployment import deployment
from windpipe import sdk
from windpipe.sdk import Catalog, LoaderConfig, ValidationConfig, WindowConfig

BOOT = "sdk-boot-token"
CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=4, seq_len=32),
    inputs={"cycling": ("current_a",)}, targets={"cycling": ("voltage_v",)},
)


def _mint(url: str, name: str, role: str, datasets: str | None = None) -> str:
    body = {"name": name, "role": role, **({"datasets": datasets} if datasets else {})}
    resp = httpx.post(f"{url}/v1/tokens", json=body,
                      headers={"Authorization": f"Bearer {BOOT}"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["token"])


def test_stored_tokens_through_the_sdk(tmp_path: Path, synth_dataset: Any) -> None:
    root = synth_dataset.path.resolve().as_uri()
    with deployment(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "state", token=BOOT) as d:
        reader = Catalog(d.url, token=_mint(d.url, "r", "reader"))
        lab = Catalog(d.url, token=_mint(d.url, "lab", "writer", "lab-*"))
        try:
            with pytest.raises(sdk.Forbidden, match="writer"):
                reader.register("lab-x", root=root, manifest="manifest.parquet")
            with pytest.raises(sdk.Forbidden, match="not scoped"):
                lab.register("other", root=root, manifest="manifest.parquet")
            version = lab.register("lab-x", root=root, manifest="manifest.parquet")
            plan = version.split(ValidationConfig.sample(fraction=0.3, seed=1)).plan(CONFIG)
            batches = list(plan.batches(epoch=0, transport="flight"))
            assert batches
            assert sum(b.tokens for b in batches) > 0
            # The unscoped reader streams it too; the scoped writer cannot read elsewhere.
            assert len(list(reader.plan(plan.id).batches(epoch=0, transport="flight"))) == len(
                batches)
            with Catalog(d.url, token=_mint(d.url, "b", "reader", "b-*")) as scoped, \
                    pytest.raises(sdk.Forbidden):
                scoped.plan(plan.id)
        finally:
            reader.close()
            lab.close()
