"""The staging tests' area: two partitions of one topic."""

from __future__ import annotations

import pytest

from core.staging import Staging


@pytest.fixture
def staging(staging: Staging) -> Staging:
    staging.set_partition_count("topic", 2)
    return staging
