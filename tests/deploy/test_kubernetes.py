"""deploy/kubernetes/ checked offline: every manifest against the Kubernetes schemas
(``kubernetes-validate``, a pinned version), the kustomization rendered when kubectl
or kustomize is on PATH, and the manifests and docker-compose.yml kept in step with
``windpipe.services.settings``: every ``WINDPIPE_*`` name they set is a setting (or one of the
SDK's client variables) and a networked deployment sets what it must."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from windpipe.cli import build_parser
from windpipe.services.discovery import DnsSource, parse_source
from windpipe.services.settings import Settings, setting_infos

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"
# variables the SDK (a training pod) reads that are not server settings
CLIENT_VARIABLES = frozenset({"WINDPIPE_URL", "WINDPIPE_TOKEN", "WINDPIPE_FLIGHT_LOCATION_MAP"})
# what a networked deployment must set (docs/security.md, docs/deploy.md), and one of
# the ways to find the Flight servers (a static list, or discovery)
NETWORKED = frozenset({"WINDPIPE_TICKET_SECRET", "WINDPIPE_ADMIN_TOKEN", "WINDPIPE_DATABASE_URL",
                       "WINDPIPE_ALLOWED_ROOTS"})
FLIGHT_FOUND_BY = frozenset({"WINDPIPE_FLIGHT_LOCATIONS", "WINDPIPE_FLIGHT_DISCOVERY"})
SECRET = frozenset({"WINDPIPE_TICKET_SECRET", "WINDPIPE_ADMIN_TOKEN", "WINDPIPE_DATABASE_URL",
                    "WINDPIPE_S3_SECRET_ACCESS_KEY"})
TIER = "/var/lib/windpipe/tier"


def _kustomization() -> dict:
    return yaml.safe_load((BASE / "kustomization.yaml").read_text())


def _manifest_files() -> list[Path]:
    return sorted(p for p in BASE.rglob("*.yaml") if p.name != "kustomization.yaml")


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _base_documents() -> list[dict]:
    return [d for name in _kustomization()["resources"] for d in _documents(BASE / name)]


def _by_kind(kind: str, name: str) -> dict:
    return next(d for d in _base_documents()
                if d["kind"] == kind and d["metadata"]["name"] == name)


def _pod(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def _secret_example() -> dict[str, str]:
    out = {}
    for line in (BASE / "secrets.env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def _config() -> dict[str, str]:
    return _by_kind("ConfigMap", "windpipe-config")["data"]


def _container_env(workload: dict) -> dict[str, dict]:
    """Every variable a workload's first container gets: its ``env`` entries and the keys
    of the ConfigMaps and generated Secrets it takes whole (``envFrom``)."""
    container = _pod(workload)["containers"][0]
    env = {e["name"]: e for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            assert source["configMapRef"]["name"] == "windpipe-config"
            env.update({k: {"name": k, "value": v} for k, v in _config().items()})
    return env


@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: str(p.relative_to(BASE)))
def test_every_manifest_validates_against_the_schemas(path):
    documents = _documents(path)
    assert documents, path
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest():
    kustomization = _kustomization()
    listed = set(kustomization["resources"])
    top = {p.name for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert listed == top
    # the image pinned in one place; no manifest names a tag of its own
    (image,) = kustomization["images"]
    assert image["name"] == "windpipe"
    assert image["newTag"] not in ("", "latest")
    for document in _base_documents():
        if document["kind"] in ("Deployment", "DaemonSet", "Job"):
            for container in _pod(document)["containers"]:
                assert container["image"] == "windpipe", document["metadata"]["name"]
    # the secrets come from an env file git never holds
    (generator,) = kustomization["secretGenerator"]
    assert generator["name"] == "windpipe-secrets"
    assert generator["envs"] == ["secrets.env"]
    assert "deploy/kubernetes/secrets.env" in (ROOT / ".gitignore").read_text().splitlines()
    assert not (BASE / "secrets.env").exists() or not _tracked(BASE / "secrets.env")


def _tracked(path: Path) -> bool:
    out = subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], cwd=ROOT,
                         capture_output=True, check=False)
    return out.returncode == 0


def _render(tmp_path: Path) -> list[dict] | None:
    copy = tmp_path / "kubernetes"
    shutil.copytree(BASE, copy)
    (copy / "secrets.env").write_text((BASE / "secrets.env.example").read_text())
    if shutil.which("kustomize"):
        command = ["kustomize", "build", str(copy)]
    elif shutil.which("kubectl"):
        command = ["kubectl", "kustomize", str(copy)]
    else:
        return None
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_the_rendered_kustomization_validates(tmp_path):
    documents = _render(tmp_path)
    if documents is None:
        pytest.skip("neither kustomize nor kubectl is on PATH (each file is validated above)")
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    kinds = sorted(d["kind"] for d in documents)
    assert kinds == ["ConfigMap", "DaemonSet", "Deployment", "Job", "Namespace", "Secret",
                     "Service", "Service"]
    secret = next(d for d in documents if d["kind"] == "Secret")["metadata"]["name"]
    assert secret.startswith("windpipe-secrets-")  # the content hash: a change rolls the pods
    for document in documents:
        assert document["metadata"].get("namespace", "windpipe") == "windpipe"
        if document["kind"] in ("Deployment", "DaemonSet", "Job"):
            container = _pod(document)["containers"][0]
            assert container["image"] == f"windpipe:{_kustomization()['images'][0]['newTag']}"
            refs = [e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]
                    if "secretKeyRef" in e.get("valueFrom", {})]
            assert refs, document["metadata"]["name"]
            assert set(refs) == {secret}


def test_windpipe_commands_parse():
    parser = build_parser()
    for document in _base_documents():
        if document["kind"] in ("Deployment", "DaemonSet", "Job"):
            args = parser.parse_args(_pod(document)["containers"][0]["args"])
            assert args.command in {"serve", "migrate"}
    assert parser.parse_args(_pod(_by_kind("Job", "windpipe-migrate"))["containers"][0]["args"]
                             ).command == "migrate"


def test_catalog_probes_and_service():
    catalog = _by_kind("Deployment", "windpipe-catalog")
    container = _pod(catalog)["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert catalog["spec"]["replicas"] >= 2
    service = _by_kind("Service", "windpipe-catalog")
    assert service["spec"]["selector"] == catalog["spec"]["selector"]["matchLabels"]


def test_flight_runs_per_node_with_its_tier_on_the_node():
    flight = _by_kind("DaemonSet", "windpipe-flight")
    pod = _pod(flight)
    args = build_parser().parse_args(pod["containers"][0]["args"])
    assert args.service == "flight"
    assert str(args.tier_dir) == TIER
    assert args.tier_bytes > 0
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == TIER)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == TIER
    env = _container_env(flight)
    assert env["WINDPIPE_FLIGHT_PUBLIC_LOCATION"]["value"] == "grpc://$(NODE_IP):8815"
    assert env["NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    node_name = {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["WINDPIPE_HOST_ID"]["valueFrom"] == node_name
    headless = _by_kind("Service", "windpipe-flight")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == flight["spec"]["selector"]["matchLabels"]
    # a training pod mounts the same node path at the same place: same-host batches
    (train,) = _documents(BASE / "examples" / "training-job.yaml")
    train_pod = _pod(train)
    train_mount = next(m for m in train_pod["containers"][0]["volumeMounts"]
                       if m["mountPath"] == TIER)
    train_volume = next(v for v in train_pod["volumes"] if v["name"] == train_mount["name"])
    assert train_volume["hostPath"]["path"] == TIER
    # ... and names its node as the server does: it reads that node's tier only
    assert _container_env(train)["WINDPIPE_HOST_ID"]["valueFrom"] == node_name


def test_discovery_points_at_the_headless_service():
    """The catalog and every Flight server find the servers by the headless Service's
    DNS name (namespace and port as deployed), re-resolved as nodes come and go."""
    source = parse_source(_config()["WINDPIPE_FLIGHT_DISCOVERY"])
    assert isinstance(source, DnsSource)
    headless = _by_kind("Service", "windpipe-flight")
    namespace = _kustomization()["namespace"]
    assert source.name == f"{headless['metadata']['name']}.{namespace}.svc.cluster.local"
    assert source.port in [p["port"] for p in headless["spec"]["ports"]]
    for kind, name in (("Deployment", "windpipe-catalog"), ("DaemonSet", "windpipe-flight")):
        env = _container_env(_by_kind(kind, name))
        assert "WINDPIPE_FLIGHT_DISCOVERY" in env, name


def _compose_variables() -> set[str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    names = set(compose["x-windpipe-env"])
    for service in compose["services"].values():
        environment = service.get("environment", {})
        names |= set(environment) if isinstance(environment, dict) else {
            e.partition("=")[0] for e in environment}
    return {n for n in names if n.startswith("WINDPIPE_")}


def _manifest_variables() -> set[str]:
    names = set(_config()) | set(_secret_example())
    for path in _manifest_files():
        for document in _documents(path):
            if document["kind"] in ("Deployment", "DaemonSet", "Job"):
                for container in _pod(document)["containers"]:
                    names |= {e["name"] for e in container.get("env", [])}
    return {n for n in names if n.startswith("WINDPIPE_")}


def test_every_variable_is_a_setting():
    variables = {info.variable for info in setting_infos()}
    sdk = "".join(p.read_text() for p in (ROOT / "windpipe" / "sdk").rglob("*.py"))
    for name in CLIENT_VARIABLES:
        assert name in sdk, name  # still read by the SDK
    for source, names in (("deploy/kubernetes", _manifest_variables()),
                          ("docker-compose.yml", _compose_variables())):
        unknown = names - variables - CLIENT_VARIABLES
        assert not unknown, f"{source}: not settings: {sorted(unknown)}"


def test_a_networked_deployment_sets_what_it_must():
    for name in ("Deployment/windpipe-catalog", "DaemonSet/windpipe-flight"):
        kind, _, workload_name = name.partition("/")
        env = _container_env(_by_kind(kind, workload_name))
        assert env.keys() >= NETWORKED, f"{name}: missing {sorted(NETWORKED - env.keys())}"
        assert env.keys() & FLIGHT_FOUND_BY, f"{name}: no way to find the Flight servers"
        for key in SECRET:
            ref = env[key]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "windpipe-secrets", "key": key}, (name, key)
    migrate = _container_env(_by_kind("Job", "windpipe-migrate"))
    assert "secretKeyRef" in migrate["WINDPIPE_DATABASE_URL"]["valueFrom"]
    assert _compose_variables() >= NETWORKED | {"WINDPIPE_FLIGHT_PUBLIC_LOCATION"}
    assert _compose_variables() & FLIGHT_FOUND_BY


def test_the_settings_parse(monkeypatch):
    """The ConfigMap and the example secrets as a Flight pod sees them."""
    for key, value in {**_config(), **_secret_example(),
                       "WINDPIPE_FLIGHT_PUBLIC_LOCATION": "grpc://10.0.0.11:8815"}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.flight_discovery == _config()["WINDPIPE_FLIGHT_DISCOVERY"]
    assert settings.flight_discovery_s == float(_config()["WINDPIPE_FLIGHT_DISCOVERY_S"])
    assert settings.database_url is not None
    assert settings.database_url.startswith("postgresql://")
    assert settings.allowed_roots == ("s3://windpipe",)
    assert settings.admin_token is not None


def test_the_example_secrets_are_placeholders():
    example = _secret_example()
    assert set(example) == {"WINDPIPE_DATABASE_URL", "WINDPIPE_ADMIN_TOKEN",
                            "WINDPIPE_TICKET_SECRET", "WINDPIPE_S3_ACCESS_KEY_ID",
                            "WINDPIPE_S3_SECRET_ACCESS_KEY"}
    for key, value in example.items():
        assert "REPLACE_ME" in value, key
    assert "PLACEHOLDERS ONLY" in (BASE / "secrets.env.example").read_text()
