import base64
import uuid

import pytest

from ticdc_sink.services import kafka


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xF8 as the first byte encodes to "-": the storage tool would take such an id for an option.
    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))
    plain = uuid.UUID(bytes=b"\x10" + bytes(15))
    drawn = iter([dashed, dashed, plain])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(drawn))

    cluster_id = kafka.new_cluster_id()

    assert base64.urlsafe_b64encode(dashed.bytes).decode().startswith("-")
    assert cluster_id == base64.urlsafe_b64encode(plain.bytes).decode().rstrip("=")
    assert len(cluster_id) == 22
