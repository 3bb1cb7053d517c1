"""The Docker set-up, without a Docker engine: docker-compose.yml against the Compose specification's JSON schema,
the services each profile starts, the commands as Compose interpolates them, the image's entrypoint run for real,
and an image without test packages.

tests/compose-spec.json is the Compose specification's schema (compose-spec, Apache-2.0) as the npm package
dclint 3.1.0 ships it (schemas/compose.schema.json), vendored so that the test runs offline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft7Validator

from qa_system.cli import build_parser
from qa_system.config import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
SCHEMA = json.loads((Path(__file__).parent / "compose-spec.json").read_text(encoding="utf-8"))
JVM_IMAGES = ("elasticsearch", "opensearch")


def compose_file() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def interpolate(value, environment: dict[str, str]):
    """Compose's ``${VAR:-default}`` / ``${VAR}`` interpolation, over every string of ``value``."""
    if isinstance(value, dict):
        return {k: interpolate(v, environment) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, environment) for v in value]
    if isinstance(value, str):
        return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: environment.get(m[1]) or (m[2] or ""), value)
    return value


def active_services(profiles: list[str]) -> dict[str, dict]:
    """The services `docker compose --profile P ... up` starts: those without profiles and those of an enabled one."""
    services = compose_file()["services"]
    return {name: s for name, s in services.items() if not s.get("profiles") or set(s["profiles"]) & set(profiles)}


def test_the_compose_file_validates_against_the_compose_specification_schema():
    validator = Draft7Validator(SCHEMA)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose_file())]
    assert errors == []
    broken = compose_file()
    broken["services"]["api"]["healthcheck"]["tests"] = broken["services"]["api"]["healthcheck"].pop("test")  # a typo
    broken["services"]["ui"]["depends_on"] = {"api": {"condition": "service_ready"}}  # no such condition
    assert len(list(validator.iter_errors(broken))) >= 2  # the schema does catch mistakes


@pytest.mark.parametrize("profiles, server", [([], None), (["elasticsearch"], "elasticsearch"), (["opensearch"], "opensearch")])
def test_each_profile_starts_at_most_one_search_server_and_every_service_has_a_health_check(profiles, server):
    services = active_services(profiles)
    assert set(services) == {"api", "ui", *([server] if server else [])}  # the OpenSearch profile starts no Elasticsearch
    jvms = [name for name, s in services.items() if any(image in s.get("image", "") for image in JVM_IMAGES)]
    assert jvms == ([server] if server else [])
    for name, service in services.items():
        assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
    dependencies = services["api"]["depends_on"]
    assert all(dependencies[s] == {"condition": "service_healthy", "required": False} for s in JVM_IMAGES)  # waits for the one that runs


def test_the_api_serves_the_collection_named_by_environment_from_the_data_volume_and_needs_no_subjqa():
    raw = compose_file()["services"]
    assert "subjqa" not in json.dumps(raw).lower()  # no SubjQA mount: it starts without it
    for environment, collection in (
        ({}, "sample"),
        ({"QA_COLLECTION": "shop", "QA_DOCUMENTS": "shop.csv", "QA_DATA": "/srv/reviews"}, "shop"),
    ):
        api = interpolate(raw["api"], environment)
        args = build_parser().parse_args(api["command"][1:])
        assert api["command"][0] == "qa-system" and args.command == "api" and args.port == 8000 and args.host == "0.0.0.0"
        assert [(c.name, c.subjqa_domain) for c in args.served] == [(collection, False)]
        assert api["environment"]["QA_COLLECTION"] == collection
        assert f"{environment.get('QA_DATA', './data')}:/data/documents:ro" in api["volumes"]
        documents = api["environment"]["QA_DOCUMENTS"]
        assert documents == f"/data/documents/{environment.get('QA_DOCUMENTS', 'reviews.csv')}"
    # The default is the repository's sample, with the columns the flags name.
    api, source = interpolate(raw["api"], {}), REPO_ROOT / "data" / "reviews.csv"
    index_args = build_parser().parse_args(
        ["index", "--input", str(source), "--collection", "sample", *api["environment"]["QA_INDEX_ARGS"].split()]
    )
    header = source.read_text(encoding="utf-8").splitlines()[0].split(",")
    assert {index_args.text_column, index_args.id_column, index_args.item_column} <= set(header)


def test_the_page_and_the_api_run_from_one_image_with_commands_the_cli_accepts_on_localhost_ports():
    services = interpolate(compose_file()["services"], {})
    assert services["api"]["build"] == services["ui"]["build"] == "." and services["api"]["image"] == services["ui"]["image"]
    args = build_parser().parse_args(services["ui"]["command"][1:])
    assert services["ui"]["command"][0] == "qa-system" and args.command == "ui" and args.port == 8501
    assert "http://127.0.0.1:8000/health" in " ".join(services["api"]["healthcheck"]["test"])
    assert "http://127.0.0.1:8501/_stcore/health" in " ".join(services["ui"]["healthcheck"]["test"])  # Streamlit's own
    assert services["ui"]["depends_on"]["api"]["condition"] == "service_healthy"  # the API indexes the collection first
    for name in ("api", "ui"):
        assert services[name]["environment"]["QA_ES_URL"] == "http://elasticsearch:9200"
        assert services[name]["environment"]["QA_OPENSEARCH_URL"] == "http://opensearch:9200"
        assert services[name]["environment"]["QA_STORE"] == "memory"
    assert interpolate(compose_file()["services"]["api"], {"QA_STORE": "opensearch"})["environment"]["QA_STORE"] == "opensearch"
    assert all(port.startswith("127.0.0.1:") for service in services.values() for port in service.get("ports", []))


def entrypoint(environment: dict[str, str], *command: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """scripts/docker_entrypoint.sh run as the image runs it, with this venv's qa-system on PATH."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO_ROOT),
        "QA_HOME": str(tmp_path / "home"),
        **environment,
    }
    return subprocess.run(
        ["sh", str(REPO_ROOT / "scripts" / "docker_entrypoint.sh"), *command],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_entrypoint_indexes_the_documents_into_the_collection_then_runs_the_command(tmp_path):
    api = interpolate(compose_file()["services"]["api"], {})
    environment = {
        "QA_DOCUMENTS": str(REPO_ROOT / "data" / "reviews.csv"),
        "QA_COLLECTION": api["environment"]["QA_COLLECTION"],
        "QA_INDEX_ARGS": api["environment"]["QA_INDEX_ARGS"] + " --no-embed",
    }
    first = entrypoint(environment, "qa-system", "collections", tmp_path=tmp_path)
    assert first.returncode == 0, first.stderr
    rows = sum(1 for _ in (REPO_ROOT / "data" / "reviews.csv").open(encoding="utf-8")) - 1
    assert f"{rows} added" in first.stdout and re.search(r"^sample\b", first.stdout, re.MULTILINE), first.stdout
    again = entrypoint(environment, "qa-system", "collections", tmp_path=tmp_path)  # a restart: nothing new to embed
    assert again.returncode == 0 and f"{rows} unchanged" in again.stdout, again.stdout


def test_the_entrypoint_refuses_a_missing_source_in_one_line(tmp_path):
    result = entrypoint({"QA_DOCUMENTS": "/data/documents/nothing.csv", "QA_COLLECTION": "sample"}, "true", tmp_path=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: /data/documents/nothing.csv does not exist") and "Fix: set QA_DATA" in result.stderr


def install_commands(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "install.sh"), *flags],
        env={**os.environ, "QA_INSTALL_DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )  # a guard against a hang, not a speed check


def test_the_image_installs_the_runtime_without_test_packages():
    dockerfile = (REPO_ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "bash scripts/install.sh --no-test" in dockerfile and 'ENTRYPOINT ["sh", "/app/scripts/docker_entrypoint.sh"]' in dockerfile
    runtime = install_commands("--no-test")
    assert runtime.returncode == 0, runtime.stderr
    assert "-e .[files]" in runtime.stdout and "[test]" not in runtime.stdout and "pytest" not in runtime.stdout
    development = install_commands()
    assert "-e .[test]" in development.stdout  # what CI and a developer get
    assert "activate" in development.stdout  # how to type qa-system alone, after installing
    wrong = install_commands("--tests")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "Fix:" in wrong.stderr
