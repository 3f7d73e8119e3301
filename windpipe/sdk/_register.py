"""Registering a version: the catalog's answer in place, or its job followed to the end.

The catalog runs every registration as a job and answers in place when it is done
within the wait the request allows (``Prefer: wait``); otherwise it answers 202 with
the job (docs/api.md, "Long registrations answer with a job"). The SDK allows
:data:`WAIT_S` seconds, so a small registration is one request, and a large one shows
``checked / total`` segments as a progress bar while it polls ``GET /v1/jobs/{id}``:
no client timeout ends it, and calling ``register`` again with the same arguments
follows the same job.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from windpipe.sdk._exceptions import Unavailable, error_from_envelope
from windpipe.sdk._html import bar_disabled, progress_bar

__all__ = ["POLL_S", "WAIT_S", "register_version"]

WAIT_S = 2
POLL_S = 0.5


class _Client(Protocol):
    def post_json(self, path: str, body: Any, *,
                  headers: dict[str, str] | None = None) -> tuple[Any, int]: ...

    def get_json(self, path: str, **params: Any) -> Any: ...


def register_version(client: _Client, name: str, body: dict[str, Any], *,
                     progress: bool | None) -> tuple[dict[str, Any], bool]:
    """The registered version's JSON and whether it is new (raises the job's error)."""
    answer, status = client.post_json(
        f"/v1/datasets/{name}/versions", body,
        headers={"Prefer": f"respond-async, wait={WAIT_S}"})
    if status != 202:
        return answer, status == 201
    return _follow(client, answer, desc=f"registering {name}", progress=progress)


def _follow(client: _Client, job: dict[str, Any], *, desc: str,
            progress: bool | None) -> tuple[dict[str, Any], bool]:
    tqdm = progress_bar()
    disable = bar_disabled(progress=progress)
    with tqdm(desc=desc, total=job.get("total"), unit="segment", disable=disable) as bar:
        while job["state"] == "running":
            time.sleep(POLL_S)
            job = client.get_json(f"/v1/jobs/{job['id']}")
            if job.get("total") is not None and bar.total != job["total"]:
                bar.total = job["total"]
            bar.update(int(job["checked"]) - bar.n)
    if job["state"] == "succeeded":
        return job["version"], bool(job["created"])
    error = error_from_envelope({"error": job.get("error")})
    if job["state"] == "interrupted" and not isinstance(error, Unavailable):
        error = Unavailable(f"registration job {job['id']} was interrupted")
    raise error
