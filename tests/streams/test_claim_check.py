"""Reading back what TiCDC's claim-check stored: locations, the stored envelope, retries."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest

from config.errors import LargeMessageError
from streams.claim_check import ClaimCheckReader, object_url, stored_message

NAME = "5c1d0e3e-8b3a-4f57-9d1c-0c5e8e3f7a21.json"


@pytest.mark.parametrize(
    ("location", "storage", "url"),
    [
        # Go's filepath.Join folds the scheme's "//": TiCDC sends these.
        (f"file:/tmp/cc/{NAME}", "", f"file:///tmp/cc/{NAME}"),
        (f"s3:/bucket/prefix/{NAME}", "", f"s3://bucket/prefix/{NAME}"),
        (f"file:///tmp/cc/{NAME}", "", f"file:///tmp/cc/{NAME}"),
        # As TiCDC's consumer: the file name under the configured storage, options kept.
        (f"s3:/other/{NAME}", "s3://bucket/p/?endpoint=http://minio:9000",
         f"s3://bucket/p/{NAME}?endpoint=http://minio:9000"),
        (f"file:/tmp/cc/{NAME}", "file:///mnt/claims", f"file:///mnt/claims/{NAME}"),
    ],
)  # fmt: skip
def test_object_url(location: str, storage: str, url: str) -> None:
    assert object_url(location, storage) == url


def _envelope(key: bytes | None, value: bytes) -> bytes:
    return orjson.dumps(
        {
            "key": None if key is None else base64.b64encode(key).decode(),
            "value": base64.b64encode(value).decode(),
        }
    )


def test_stored_message_reads_ticdcs_envelope_and_a_raw_value() -> None:
    assert stored_message(_envelope(b"\x00k", b"v\xff")) == (b"\x00k", b"v\xff")
    assert stored_message(_envelope(None, b"{}")) == (None, b"{}")
    # canal-json with claim-check-raw-value=true stores the value itself.
    raw = b'{"id":0,"database":"d","table":"t","data":[{"id":"1"}],"key":"x"}'
    assert stored_message(raw) == (None, raw)
    assert stored_message(b"\x82\x01snappy") == (None, b"\x82\x01snappy")
    with pytest.raises(ValueError, match="base64"):
        stored_message(b'{"key": null, "value": "not base64!"}')


def test_a_file_location_is_read(tmp_path: Path) -> None:
    (tmp_path / NAME).write_bytes(_envelope(b"key", b"value"))
    reader = ClaimCheckReader()
    assert reader.read(f"file:{tmp_path}/{NAME}", "open") == (b"key", b"value")
    # Elsewhere, found by its file name under the configured storage.
    moved = ClaimCheckReader(storage=tmp_path.as_uri())
    assert moved.read(f"file:/nowhere/{NAME}", "open") == (b"key", b"value")


def test_an_unreadable_location_is_retried_then_refused(tmp_path: Path) -> None:
    waits: list[float] = []
    reader = ClaimCheckReader(attempts=3, sleep=waits.append)
    with pytest.raises(LargeMessageError) as raised:
        reader.read(f"file:{tmp_path}/{NAME}", "simple")
    assert len(waits) == 2 and waits[1] > waits[0]
    message = str(raised.value)
    assert message.startswith("simple: claim-check object file://")
    assert "unreadable after 3 attempts" in message and "No such file" in message


def test_an_object_that_appears_between_attempts_is_read(tmp_path: Path) -> None:
    path = tmp_path / NAME
    reader = ClaimCheckReader(attempts=2, sleep=lambda _: path.write_bytes(_envelope(None, b"v")))
    assert reader.read(f"file:{path}", "canal-json") == (None, b"v")


def test_a_store_it_cannot_read_is_named() -> None:
    with pytest.raises(LargeMessageError, match="only file, s3 storage is read"):
        ClaimCheckReader().read("gcs:/bucket/x.json", "open")


def test_a_broken_envelope_is_refused_without_retries(tmp_path: Path) -> None:
    (tmp_path / NAME).write_bytes(b'{"key": 5, "value": ""}')
    waits: list[float] = []
    with pytest.raises(LargeMessageError, match="not TiCDC's stored message"):
        ClaimCheckReader(sleep=waits.append).read(f"file:{tmp_path}/{NAME}", "open")
    assert waits == []


def test_an_s3_store_that_does_not_answer_is_retried_then_refused() -> None:
    # A real boto3 client against a closed port: the message names where and why.
    storage = "s3://claims/cf?endpoint=http://127.0.0.1:9&region=us-east-1&access-key=a&secret-access-key=b"
    waits: list[float] = []
    reader = ClaimCheckReader(storage=storage, attempts=2, sleep=waits.append)
    with pytest.raises(LargeMessageError) as raised:
        reader.read(f"s3:/elsewhere/{NAME}", "open")
    assert len(waits) == 1
    assert f"claim-check object s3://claims/cf/{NAME} (location" in str(raised.value)
    assert "Could not connect" in str(raised.value)
    assert "secret-access-key" not in str(raised.value)
