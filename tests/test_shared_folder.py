"""What a test that reads the shared folder says when it is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import conftest


def test_a_missing_shared_folder_names_the_path_and_where_shared_must_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(conftest.SHARED_ENV, str(tmp_path))
    # Under CI it fails, elsewhere it skips: the message is the same.
    with pytest.raises((pytest.skip.Exception, pytest.fail.Exception)) as raised:
        conftest.shared_folder("conformance")
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'conformance'} is missing: ")
    assert f"the shared/ folder must sit beside the checkout ({conftest.CHECKOUT})" in message
    assert "services up" not in message
    (tmp_path / "conformance").mkdir()
    assert conftest.shared_folder("conformance") == tmp_path / "conformance"
