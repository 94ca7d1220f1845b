"""The downstream's ssl-mode as PyMySQL arguments and as Connector/J properties."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from config.settings import load_settings
from spark_sink.db.tls import jdbc_tls, pymysql_tls
from spark_sink.load.spark_session import jdbc_options
from ticdc_sink.services.certificates import make_authority


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_authority(tmp_path_factory.mktemp("ca"))


def _downstream(query: str):  # type: ignore[no-untyped-def]
    return load_settings(
        environ={"TICDC_SINK_DOWNSTREAM": f"mysql://u:pw@db:3306/{query}"}
    ).downstream.url


def test_disabled_and_preferred() -> None:
    assert pymysql_tls(_downstream("?ssl-mode=disabled")) == {"ssl_disabled": True}
    assert pymysql_tls(_downstream("")) == {}
    # Connector/J 2.7 has no fallback mode: preferred loads through Spark in plaintext.
    assert jdbc_tls(_downstream("")) == {"useSsl": "false"}


@pytest.mark.parametrize(
    ("mode", "verify", "hostname", "jdbc"),
    [
        ("required", ssl.CERT_NONE, False, {"trustServerCertificate": "true"}),
        ("verify-ca", ssl.CERT_REQUIRED, False, {"disableSslHostnameVerification": "true"}),
        ("verify-identity", ssl.CERT_REQUIRED, True, {}),
    ],
)
def test_each_verifying_mode(
    authority, mode: str, verify: int, hostname: bool, jdbc: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    ca = f"&ssl-ca={authority.ca}" if mode != "required" else ""
    downstream = _downstream(f"?ssl-mode={mode}{ca}")
    context = pymysql_tls(downstream)["ssl"]
    assert context.verify_mode == verify
    assert context.check_hostname is hostname
    expected = {"useSsl": "true", **jdbc}
    if ca:
        expected["serverSslCert"] = str(authority.ca)
    assert jdbc_tls(downstream) == expected


def test_a_client_certificate_becomes_a_private_key_store(authority) -> None:  # type: ignore[no-untyped-def]
    downstream = _downstream(
        f"?ssl-mode=verify-identity&ssl-ca={authority.ca}"
        f"&ssl-cert={authority.client_cert}&ssl-key={authority.client_key}"
    )
    options = jdbc_options(downstream, "meta")
    assert options["url"].startswith("jdbc:mysql://db:3306/meta?")
    assert "allowLocalInfile=false" in options["url"]
    assert options["keyStoreType"] == "PKCS12"
    store = Path(options["keyStore"])
    assert store.stat().st_mode & 0o777 == 0o600
    from cryptography.hazmat.primitives.serialization import pkcs12

    loaded = pkcs12.load_key_and_certificates(
        store.read_bytes(), options["keyStorePassword"].encode()
    )
    assert loaded[1] is not None
    assert loaded[1].subject.rfc4514_string() == "CN=ticdc-sink client"
    # The secrets travel as properties, never in the URL Spark logs.
    assert options["keyStorePassword"] not in options["url"]
    assert "pw" not in options["url"]
