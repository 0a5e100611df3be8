"""docker/compose.yaml agrees with the settings the code reads."""

from pathlib import Path

import yaml

from controlpanel import env

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "compose.yaml"


def load() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


WORKERS = ("worker-1", "worker-2")


def test_services_exist() -> None:
    assert {"postgres", "redis", "web", *WORKERS} <= set(load()["services"])


def test_each_machine_has_a_disk_of_its_own() -> None:
    """Web and workers share no volume, as separate machines share no disk."""
    services = load()["services"]
    mounts = {name: set(services[name]["volumes"]) for name in ("web", *WORKERS)}
    for name, volumes in mounts.items():
        assert volumes, name
        var_dir = services[name]["environment"]["SHARDBOARD_VAR_DIR"]
        assert any(v.endswith(f":{var_dir}") for v in volumes), name
        others = set().union(*(v for n, v in mounts.items() if n != name))
        assert not {v.split(":")[0] for v in volumes} & {v.split(":")[0] for v in others}
    names = {services[w]["environment"]["SHARDBOARD_HOST_NAME"] for w in WORKERS}
    assert len(names) == len(WORKERS)  # each its own queue host.<name>


def test_web_and_worker_share_valid_settings(monkeypatch) -> None:
    services = load()["services"]
    for name in ("web", *WORKERS):
        environment = services[name]["environment"]
        monkeypatch.setenv("DATABASE_URL", environment["DATABASE_URL"])
        monkeypatch.setenv("REDIS_URL", environment["REDIS_URL"])
        assert env.database_url("DATABASE_URL", "") == environment["DATABASE_URL"]
        assert env.redis_url("REDIS_URL", "") == environment["REDIS_URL"]
        assert "@postgres:5432/" in environment["DATABASE_URL"]
        assert "//redis:6379/" in environment["REDIS_URL"]
    for worker in WORKERS:
        assert services[worker]["command"][-1] == "hostworker"
        assert "SHARDBOARD_HOST_NAME" in services[worker]["environment"]


def test_postgres_credentials_match_url() -> None:
    services = load()["services"]
    pg = services["postgres"]["environment"]
    url = services["web"]["environment"]["DATABASE_URL"]
    assert f"{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@" in url
    assert url.endswith(f"/{pg['POSTGRES_DB']}")
