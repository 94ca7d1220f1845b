"""The downstream's address: a ``mysql://`` URL with TiCDC's TLS parameters, parsed and checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr

from config.choices import SslMode
from config.masking import MASK

# Query parameters of TICDC_SINK_DOWNSTREAM, spelled as TiCDC's sink-uri and MySQL's client do.
DOWNSTREAM_PARAMETERS = ("ssl-mode", "ssl-ca", "ssl-cert", "ssl-key")


class Downstream(BaseModel):
    """A parsed ``mysql://user:password@host:port/?ssl-mode=...`` address; the password never
    prints. ``ssl_mode`` None means MySQL's default: verify-ca with a CA file, else preferred."""

    model_config = ConfigDict(frozen=True)

    user: str
    password: SecretStr
    host: str
    port: int
    ssl_mode: SslMode | None = None
    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""

    @classmethod
    def parse(cls, url: str) -> Downstream:
        parts = urlsplit(url)
        if parts.scheme != "mysql":
            raise ValueError("must start with mysql://")
        if not parts.hostname:
            raise ValueError("has no host")
        try:
            port = parts.port or 3306
        except ValueError as exc:
            raise ValueError("has an invalid port") from exc
        return cls(
            user=unquote(parts.username or "root"),
            password=SecretStr(unquote(parts.password or "")),
            host=parts.hostname,
            port=port,
            **_downstream_parameters(parts.query),
        )

    @property
    def effective_ssl_mode(self) -> SslMode:
        if self.ssl_mode is not None:
            return self.ssl_mode
        return SslMode.VERIFY_CA if self.ssl_ca else SslMode.PREFERRED

    def __str__(self) -> str:
        secret = ":" + MASK if self.password.get_secret_value() else ""
        query = "&".join(
            f"{name}={quote(str(value), safe='/')}"
            for name, value in zip(
                DOWNSTREAM_PARAMETERS,
                (self.ssl_mode or "", self.ssl_ca, self.ssl_cert, self.ssl_key),
                strict=True,
            )
            if value
        )
        return f"mysql://{self.user}{secret}@{self.host}:{self.port}/" + (
            f"?{query}" if query else ""
        )

    def check_tls(self) -> None:
        """Refuse TLS files a mode would not use, and a key without its certificate."""
        mode = self.effective_ssl_mode
        if mode in {SslMode.DISABLED, SslMode.PREFERRED}:
            given = [n for n, v in (("ssl-ca", self.ssl_ca), ("ssl-cert", self.ssl_cert)) if v]
            if given:
                raise ValueError(
                    f"{', '.join(given)} need ssl-mode=required, verify-ca or verify-identity "
                    f"(ssl-mode={mode} would not use them)"
                )
        if bool(self.ssl_cert) != bool(self.ssl_key):
            raise ValueError("ssl-cert and ssl-key go together (a client certificate and its key)")
        for name, path in (("ssl-ca", self.ssl_ca), ("ssl-cert", self.ssl_cert)):
            if path and not Path(path).is_file():
                raise ValueError(f"{name}={path}: no such file")
        if self.ssl_key and not Path(self.ssl_key).is_file():
            raise ValueError(f"ssl-key={self.ssl_key}: no such file")

    def jdbc_url(self, database: str = "") -> str:
        """The JDBC address; `mysql:`, since the `mariadb:` scheme makes Spark quote with `"`."""
        return f"jdbc:mysql://{self.host}:{self.port}/{database}"


def _downstream_parameters(query: str) -> dict[str, Any]:
    """The TLS fields of a downstream URL's query; any other parameter is an error."""
    fields: dict[str, Any] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in DOWNSTREAM_PARAMETERS:
            raise ValueError(
                f"unknown parameter {name!r} (known: {', '.join(DOWNSTREAM_PARAMETERS)})"
            )
        field = name.replace("-", "_")
        if field in fields:
            raise ValueError(f"parameter {name!r} is given twice")
        if name == "ssl-mode":
            try:
                fields[field] = SslMode(value.lower())
            except ValueError:
                raise ValueError(
                    f"ssl-mode={value!r} must be one of {', '.join(m.value for m in SslMode)}"
                ) from None
        else:
            fields[field] = value
    return fields
