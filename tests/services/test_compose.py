"""docker-compose.yml cannot run here; check it against the CLI and the settings."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from windpipe.cli import build_parser
from windpipe.services.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _windpipe_services(compose: dict) -> dict[str, dict]:
    return {name: s for name, s in compose["services"].items()
            if s.get("image") == f"windpipe:{VERSION}"}


def test_services_present_with_health_checks(compose):
    services = compose["services"]
    for name in ("postgres", "minio", "catalog", "flight-1", "flight-2"):
        assert name in services, name
        assert "healthcheck" in services[name], name


def test_windpipe_commands_parse(compose):
    parser = build_parser()
    built = list(_windpipe_services(compose).values())
    assert len(built) >= 4
    for service in built:
        args = parser.parse_args(service["command"])
        assert args.command in {"serve", "migrate"}


def test_environment_names_settings_fields(compose):
    fields = set(Settings.model_fields)
    for name, service in _windpipe_services(compose).items():
        for key, value in service["environment"].items():
            if key.startswith("WINDPIPE_"):
                field = key.removeprefix("WINDPIPE_").lower()
                assert field in fields, f"{name}: {key} is not a setting"
                Settings(**{field: value} if field != "flight_locations" else {})
    env = compose["services"]["flight-1"]["environment"]
    monkey = {k: str(v) for k, v in env.items() if k.startswith("WINDPIPE_")}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in monkey.items():
            mp.setenv(k, v)
        settings = Settings()
    assert settings.flight_locations == ("grpc://flight-1:8815", "grpc://flight-2:8815")
    assert settings.flight_public_location == "grpc://flight-1:8815"
    assert settings.database_url.startswith("postgresql://")


def test_flight_servers_share_secret_and_locations(compose):
    f1 = compose["services"]["flight-1"]["environment"]
    f2 = compose["services"]["flight-2"]["environment"]
    assert f1["WINDPIPE_TICKET_SECRET"] == f2["WINDPIPE_TICKET_SECRET"]
    assert f1["WINDPIPE_FLIGHT_LOCATIONS"] == f2["WINDPIPE_FLIGHT_LOCATIONS"]
    assert f1["WINDPIPE_FLIGHT_PUBLIC_LOCATION"] != f2["WINDPIPE_FLIGHT_PUBLIC_LOCATION"]


def test_the_image_copies_every_installed_package():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    installed = {p.rstrip("*") for p in
                 pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") and "/" not in line.split()[1]
              and (ROOT / line.split()[1]).is_dir()}
    assert installed == copied
    # one top-level package (the five parts are its subpackages); bench runs from the checkout
    assert installed == {"windpipe"}
    assert installed | {"bench"} == set(pyproject["tool"]["importlinter"]["root_packages"])
    assert "torch" not in (ROOT / "Dockerfile").read_text().split("\nFROM", 1)[1]


def test_secrets_come_from_an_uncommitted_env_file(compose):
    env = compose["x-windpipe-env"]
    for key in ("WINDPIPE_TICKET_SECRET", "WINDPIPE_ADMIN_TOKEN", "WINDPIPE_S3_SECRET_ACCESS_KEY"):
        assert env[key].startswith("${"), key
        assert ":?" in env[key], key
    assert ":?" in env["WINDPIPE_DATABASE_URL"]
    assert env["WINDPIPE_ALLOWED_ROOTS"] == "s3://windpipe"
    example = (ROOT / ".env.example").read_text()
    for key in ("WINDPIPE_TICKET_SECRET", "WINDPIPE_ADMIN_TOKEN", "POSTGRES_PASSWORD",
                "MINIO_ROOT_PASSWORD"):
        assert f"\n{key}=\n" in example, key
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()
    assert "mc mb" in " ".join(compose["services"]["minio-init"]["command"])
    assert "windpipe-secret" not in (ROOT / "docker-compose.yml").read_text()


def test_one_named_image_built_once_and_every_tag_pinned(compose):
    services = compose["services"]
    windpipe = _windpipe_services(compose)
    assert set(windpipe) == {"migrate", "catalog", "flight-1", "flight-2"}
    built = [name for name, s in services.items() if "build" in s]
    assert built == ["migrate"], built  # the others reuse windpipe:<version>
    for name in set(windpipe) - set(built):
        assert windpipe[name]["pull_policy"] == "never", name
    for name, service in services.items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository, image
        assert tag not in ("", "latest"), f"{name}: {image} is not pinned"
    assert services["minio"]["image"].startswith("minio/minio:RELEASE.")


def test_the_store_is_reachable_from_the_host(compose):
    """MinIO's S3 port is published, so `windpipe upload` from the host reaches it."""
    minio = compose["services"]["minio"]
    assert "9000:9000" in minio["ports"]
    readme = (ROOT / "README.md").read_text()
    deployment = readme.split("## Deployment", 1)[1].split("\n## ", 1)[0]
    for step in ("cp .env.example .env", "docker compose build", "docker compose up",
                 "windpipe upload", "WINDPIPE_S3_ENDPOINT=http://localhost:9000",
                 "s3://windpipe/", "docs/deploy.md"):
        assert step in deployment, step
    assert "upload" in build_parser().parse_args(
        ["upload", "d", "s3://windpipe/d"]).command


def _locked() -> dict[str, tuple[str, int]]:
    """deploy/requirements.lock: each package's pinned version and how many hashes."""
    locked: dict[str, tuple[str, int]] = {}
    name = ""
    for line in (ROOT / "deploy" / "requirements.lock").read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            name, _, version = line.split(" ")[0].partition("==")
            assert version, f"{line}: not pinned with =="
            locked[canonicalize_name(name)] = (version, 0)
        elif line.strip().startswith("--hash=sha256:"):
            version, hashes = locked[canonicalize_name(name)]
            locked[canonicalize_name(name)] = (version, hashes + 1)
    return locked


def test_the_image_installs_a_hashed_lock_that_satisfies_pyproject():
    """The server image's dependencies come from deploy/requirements.lock (hashes
    required); every requirement of the base, the server and the otel extras is in it
    at a version pyproject.toml accepts (traces need no other image), and torch is not."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--require-hashes -r deploy/requirements.lock" in dockerfile
    assert '--no-deps ".[server,otel]"' in dockerfile
    base = dockerfile.split("\n", 3)[2]
    assert re.fullmatch(r"FROM python:\d+\.\d+\.\d+-slim-\w+", base), base
    locked = _locked()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in
              [*project["dependencies"], *project["optional-dependencies"]["server"],
               *project["optional-dependencies"]["otel"]]]
    for requirement in wanted:
        if requirement.marker is not None and not requirement.marker.evaluate(
                {"python_version": "3.11", "sys_platform": "linux"}):
            continue
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in deploy/requirements.lock"
        version, hashes = locked[name]
        assert requirement.specifier.contains(version, prereleases=True), (name, version)
        assert hashes >= 1, name
    assert "torch" not in locked
    assert all(hashes >= 1 for _version, hashes in locked.values())


def test_third_party_images_are_pinned_to_a_full_version(compose):
    postgres = compose["services"]["postgres"]["image"]
    assert re.fullmatch(r"postgres:\d+\.\d+(-\w+)?", postgres), postgres
