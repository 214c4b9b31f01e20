"""Fixtures of the client's tests: real nodes named by the environment, a fresh tenant per
test (so tests share no keys, users or rate budgets), and its keys made with the root key.

- ``ENGRAM_URL``: a node (inference may be off); ``ENGRAM_ADMIN_KEY``: its root admin key.
- ``ENGRAM_RATE_URL``: a node with a low per-key rate limit (``security.rate-limit`` 1,
  ``rate-burst`` 3), same root key, for the 429 tests.

``tests/tests/python_client.rs`` starts both and runs this suite. Without them the tests that
need a node skip, saying why; the policy tests (``test_retry_policy.py``) need none.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TypeVar

import pytest
import pytest_asyncio

from engram_client import AsyncEngram, Engram

T = TypeVar("T")


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set: these tests need a real node (see conftest.py)")
    return value


def unique(prefix: str) -> str:
    """A fresh id (user, session, tenant): tests never see each other's data."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def eventually(what: str, check: Callable[[], T | None], timeout: float = 15.0) -> T:
    """Polls ``check`` until it returns something other than ``None`` (or false), or fails
    with ``what`` at the deadline: a condition, never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout} s")
        time.sleep(0.02)


class Keys:
    """Tokens of a fresh tenant's keys."""

    def __init__(self, root: Engram) -> None:
        self.gateway = root.create_key("gateway", name="pytest-gateway").token
        self.admin = root.create_key("admin", name="pytest-admin").token


@pytest.fixture(scope="session")
def url() -> str:
    return env("ENGRAM_URL")


@pytest.fixture(scope="session")
def root_key() -> str:
    return env("ENGRAM_ADMIN_KEY")


@pytest.fixture
def tenant() -> str:
    return unique("py")


@pytest.fixture
def root(url: str, root_key: str, tenant: str) -> Iterator[Engram]:
    """The root admin key acting for the test's tenant."""
    with Engram(url, root_key, tenant=tenant) as client:
        yield client


@pytest.fixture
def keys(root: Engram) -> Keys:
    return Keys(root)


@pytest.fixture
def gateway(url: str, keys: Keys) -> Iterator[Engram]:
    with Engram(url, keys.gateway) as client:
        yield client


@pytest.fixture
def admin(url: str, keys: Keys) -> Iterator[Engram]:
    """The tenant's own admin key."""
    with Engram(url, keys.admin) as client:
        yield client


@pytest_asyncio.fixture
async def agateway(url: str, keys: Keys) -> AsyncIterator[AsyncEngram]:
    async with AsyncEngram(url, keys.gateway) as client:
        yield client


@pytest_asyncio.fixture
async def aadmin(url: str, keys: Keys) -> AsyncIterator[AsyncEngram]:
    async with AsyncEngram(url, keys.admin) as client:
        yield client
