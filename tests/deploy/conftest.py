"""The deploy test runs only when asked for (`-m deploy`, make deploy-test): it builds images,
starts pods with podman as root and takes minutes."""

import pytest


def pytest_collection_modifyitems(config, items):
    if "deploy" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="the deploy test runs only with -m deploy (make deploy-test)")
    for item in items:
        if "deploy" in item.keywords:
            item.add_marker(skip)
