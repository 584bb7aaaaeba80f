"""docker-compose.yml and ops/deploy/k8s/ parse, and every synth command they run is a real `synth` command
with options it accepts (there is no Docker engine or cluster here: this is what can be checked)."""

from __future__ import annotations

import tomllib

import click
import pytest
import yaml

from cli.main import cli
from tests.conftest import REPO

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
K8S = [
    doc
    for path in sorted((REPO / "ops" / "deploy" / "k8s").glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if doc
]


def check_synth_args(args: list[str]) -> None:
    """Parse ``synth <args>`` with the real click commands: unknown commands or options raise."""
    command, rest = cli, list(args)
    while isinstance(command, click.Group):
        name, rest = rest[0], rest[1:]
        sub = command.get_command(click.Context(command), name)
        assert sub is not None, f"`synth {' '.join(args)}`: no command {name!r}"
        command = sub
    command.make_context(command.name, rest)


def synth_services() -> dict[str, dict]:
    return {name: s for name, s in SERVICES.items() if "build" in s and "entrypoint" not in s}


def test_compose_has_the_whole_stack():
    assert {
        "redis",
        "postgres",
        "minio",
        "minio-bucket",
        "migrate",
        "api",
        "beat",
        "flower",
        "worker-gpu0",
        "worker-gpu1",
    } <= set(SERVICES)


@pytest.mark.parametrize("name", sorted(synth_services()))
def test_compose_commands_are_real_synth_commands(name):
    service = SERVICES[name]
    check_synth_args(service["command"])
    env = service["environment"]
    assert env["SYNTH_REDIS_URL"].startswith("redis://redis:") and env["SYNTH_DATABASE_URL"].startswith("postgresql")
    assert env["SYNTH_S3_ENDPOINT_URL"] == "http://minio:9000"
    if name != "migrate":  # everything else starts after the migrations succeeded
        assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}


def test_one_pinned_worker_per_gpu():
    gpu_workers = {n: s for n, s in SERVICES.items() if n.startswith("worker-gpu")}
    device_ids = []
    for service in gpu_workers.values():
        assert service["command"][:2] == ["worker", "--gpu"]
        [device] = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        device_ids += device["device_ids"]
        assert "orpheus" in service["build"]["args"]["EXTRAS"]
    assert sorted(device_ids) == ["0", "1"]  # each card to exactly one worker


def test_migrations_beat_api_and_flower():
    assert SERVICES["migrate"]["command"] == ["db", "upgrade"]
    assert SERVICES["beat"]["command"] == ["beat"]
    assert SERVICES["api"]["command"][0] == "api" and "api" in SERVICES["api"]["build"]["args"]["EXTRAS"]
    flower = SERVICES["flower"]
    assert flower["entrypoint"] == ["celery"] and "flower" in flower["command"]
    assert "flower" in flower["build"]["args"]["EXTRAS"]
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for service in SERVICES.values():  # every extra a build asks for exists
        build = service.get("build")
        if isinstance(build, dict):
            assert set(build["args"]["EXTRAS"].split(",")) <= set(extras)
    assert (REPO / "Dockerfile").read_text().count('ENTRYPOINT ["synth"]') == 1


def test_k8s_manifests():
    kinds = {(d["kind"], d["metadata"]["name"]) for d in K8S}
    assert {
        ("Deployment", "synth-api"),
        ("Deployment", "synth-worker-gpu"),
        ("Deployment", "synth-beat"),
        ("Job", "synth-migrate"),
        ("ConfigMap", "synth-config"),
    } <= kinds
    for doc in K8S:
        spec = doc.get("spec", {}).get("template", {}).get("spec")
        for container in (spec or {}).get("containers", []):
            check_synth_args(container["args"])
    worker = next(d for d in K8S if d["metadata"]["name"] == "synth-worker-gpu")
    [container] = worker["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1 and container["args"] == ["worker", "--gpu", "0"]
    beat = next(d for d in K8S if d["metadata"]["name"] == "synth-beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"


def test_the_api_and_the_gpu_workers_name_the_same_engine():
    """The API refuses a voice the engine does not list and accepts one it does; an Orpheus worker
    renders any voice name it is given, so an API that thinks the engine is Piper sends it jobs for
    Piper's voice. The shared settings take the engine from the environment, as the header says."""
    engine = SERVICES["api"]["environment"]["SYNTH_ENGINE"]
    assert engine == "${SYNTH_ENGINE:-piper}"
    assert "SYNTH_ENGINE=orpheus docker compose --profile gpu up" in (REPO / "docker-compose.yml").read_text()
    for name in ("worker-gpu0", "worker-gpu1"):
        assert SERVICES[name]["environment"]["SYNTH_ENGINE"] == "orpheus"


def test_the_default_image_has_what_the_k8s_pods_built_from_it_run():
    dockerfile = (REPO / "Dockerfile").read_text()
    [default] = [line.split("=", 1)[1] for line in dockerfile.splitlines() if line.startswith("ARG EXTRAS=")]
    for doc in K8S:
        spec = doc.get("spec", {}).get("template", {}).get("spec") or {}
        for container in spec.get("containers", []):
            if container["image"].endswith("/synth:latest") and container["args"][0] == "api":
                assert "api" in default.split(","), "the API pod's image is the default build, without the api extra"
