"""Fixtures of the end-to-end tests on a real Docker daemon (see harness.py for what they start and why).

All e2e tests share one daemon per session: they are put in one xdist group (`--dist loadgroup`, set in
pyproject.toml), so with `-n auto` one worker runs them all and only that worker starts a daemon.
Where no daemon can be used they skip with the reason, except under CI=1, where that is a failure:
CI must prove the Docker layer on a real engine, never report it skipped.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import Docker, Unavailable, docker_engine, import_standin_image

E2E_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.xdist_group("docker-e2e"))


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI=1 needs a real Docker engine for the e2e tests: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker() -> Iterator[Docker]:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        try:
            client = stack.enter_context(docker_engine())
        except Unavailable as reason:
            unavailable(str(reason))
        print(f"\ne2e: Docker engine {client.host} ready in {time.monotonic() - started:.2f}s")
        yield client


@pytest.fixture(scope="session")
def standin_image(docker: Docker) -> str:
    """The stand-in image's id, tagged with the schema's default image references."""
    from components.config.docker import DEFAULT_IMAGES
    from components.config.monitoring import DEFAULT_EXPORTER_IMAGE

    started = time.monotonic()
    image = import_standin_image(docker, [*DEFAULT_IMAGES.values(), DEFAULT_EXPORTER_IMAGE])
    print(f"\ne2e: stand-in image imported in {time.monotonic() - started:.2f}s")
    return image
