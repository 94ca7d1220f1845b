"""Secured variants of the local services, beside the plain ones (`services up --secure`).

Kafka with a SASL_SSL listener (SCRAM users made at format time), MariaDB with
``require_secure_transport=ON`` and a password user that must show a client certificate, Redis on
a TLS port with an ACL user, and (with the registry) nginx in front of the schema registry with
TLS and basic auth; all share one throwaway CA (``certificates.py``). The settings that
reach them go to ``<state dir>/secure.env``, which names the password files, never a password.
"""

from __future__ import annotations

import base64
import grp
import hashlib
import os
import pwd
import secrets
import shlex
import socket
import ssl
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path
from string import Template
from urllib.parse import quote

from config.errors import ServiceError
from ticdc_sink.services.base import (
    Endpoint,
    LocalService,
    ServiceState,
    port_open,
    require_binary,
    state_dir,
)
from ticdc_sink.services.certificates import Authority, make_authority
from ticdc_sink.services.kafka import KafkaService
from ticdc_sink.services.mariadb import MariaDBService
from ticdc_sink.services.redis import RedisService
from ticdc_sink.services.registry import RegistryService

# The one user every secured service knows, each with its own password.
SECURE_USER = "ticdc"
SECURE_ENV = "secure.env"
# The plain ports plus two (Kafka's controller needs its own port too).
SECURE_KAFKA_PORT = 9094
SECURE_KAFKA_CONTROLLER_PORT = 9095
SECURE_MARIADB_PORT = 3307
SECURE_REDIS_PORT = 6380
SECURE_REGISTRY_PORT = 8082
# The secured broker is a second JVM on a shared machine: half the plain one's heap.
SECURE_KAFKA_HEAP = "-Xmx512m"


def secure_home() -> Path:
    """Certificates and password files of the secured services."""
    return state_dir() / "secure"


def authority() -> Authority:
    return make_authority(secure_home())


def password_file(service: str) -> Path:
    """The file holding ``service``'s password, made (random, owner-only) on first use."""
    path = secure_home() / f"{service}-password"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(18) + "\n")
    return path


def password(service: str) -> str:
    return password_file(service).read_text().strip()


def client_tls() -> ssl.SSLContext:
    """What a local probe presents: the CA's trust and the client certificate."""
    ca = authority()
    context = ssl.create_default_context(cafile=str(ca.ca))
    context.load_cert_chain(str(ca.client_cert), str(ca.client_key))
    return context


class SecureKafkaService(KafkaService):
    name = "kafka-secure"
    endpoint = Endpoint("127.0.0.1", SECURE_KAFKA_PORT)
    start_option = "--secure"
    controller_port = SECURE_KAFKA_CONTROLLER_PORT
    heap = SECURE_KAFKA_HEAP
    template = "kafka-secure-server.properties"

    @property
    def lib(self) -> Path:
        # The same jars as the plain broker: resolved once.
        return KafkaService().lib

    def template_values(self) -> dict[str, object]:
        ca = authority()
        return {
            **super().template_values(),
            "user": SECURE_USER,
            "password": password("kafka"),
            "keystore": ca.server_bundle,
            "truststore": ca.ca,
        }

    def format_arguments(self) -> list[str]:
        # The broker's own user and the clients' (one user here), for both SCRAM mechanisms.
        login = f"[name={SECURE_USER},password={password('kafka')}]"
        return ["--add-scram", f"SCRAM-SHA-256={login}", "--add-scram", f"SCRAM-SHA-512={login}"]

    def client_context(self) -> ssl.SSLContext | None:
        return client_tls()


class SecureMariaDBService(MariaDBService):
    name = "mariadb-secure"
    endpoint = Endpoint("127.0.0.1", SECURE_MARIADB_PORT)
    start_option = "--secure"

    def command(self) -> list[str]:
        ca = authority()
        return [
            *super().command(),
            f"--ssl-ca={ca.ca}",
            f"--ssl-cert={ca.server_cert}",
            f"--ssl-key={ca.server_key}",
            "--require-secure-transport=ON",
        ]

    def up(self) -> ServiceState:
        state = super().up()
        self._create_user()
        return state

    def _create_user(self) -> None:
        """The password user, over the server's socket (which counts as secure transport)."""
        import pymysql

        try:
            conn = pymysql.connect(unix_socket=str(self.socket), user="root")
        except pymysql.MySQLError as exc:
            raise ServiceError(f"{self.name}: cannot reach it over its socket: {exc}") from None
        with conn, conn.cursor() as cursor:
            cursor.execute(
                "CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s REQUIRE X509",
                (SECURE_USER, password("mariadb")),
            )
            cursor.execute("GRANT ALL PRIVILEGES ON *.* TO %s@'%%'", (SECURE_USER,))


class SecureRedisService(RedisService):
    name = "redis-secure"
    endpoint = Endpoint("127.0.0.1", SECURE_REDIS_PORT)
    start_option = "--secure"

    @property
    def acl_file(self) -> Path:
        return self.home / "users.acl"

    def prepare(self) -> None:
        # The ACL in a file of its own: a password on the command line shows in `ps`.
        self.acl_file.touch(mode=0o600)
        self.acl_file.write_text(
            f"user default off\nuser {SECURE_USER} on >{password('redis')} ~* &* +@all\n"
        )

    def ready(self) -> bool:
        """AUTH and PING answered over TLS with the client certificate."""
        try:
            with (
                socket.create_connection(
                    (self.endpoint.host, self.endpoint.port), timeout=1
                ) as raw,
                client_tls().wrap_socket(raw, server_hostname=self.endpoint.host) as conn,
            ):
                conn.sendall(f"AUTH {SECURE_USER} {password('redis')}\r\nPING\r\n".encode())
                reply = b""
                while reply.count(b"\r\n") < 2:
                    chunk = conn.recv(64)
                    if not chunk:
                        return False
                    reply += chunk
                return reply.endswith(b"+PONG\r\n")
        except (OSError, ssl.SSLError):
            return False

    def command(self) -> list[str]:
        ca = authority()
        plain = super().command()
        port = plain.index("--port")
        # No plaintext port: TLS only, and every client shows a certificate of the CA.
        return [
            *plain[:port],
            "--port", "0",
            *plain[port + 2 :],
            "--tls-port", str(self.endpoint.port),
            "--tls-cert-file", str(ca.server_cert),
            "--tls-key-file", str(ca.server_key),
            "--tls-ca-cert-file", str(ca.ca),
            "--tls-auth-clients", "yes",
            "--aclfile", str(self.acl_file),
        ]  # fmt: skip


class SecureRegistryService(LocalService):
    """nginx in front of the plain schema registry: TLS with the CA's server certificate, basic
    auth, ``{}`` at the root for TiCDC's check, the Confluent API below it. Apicurio 2.6 has no
    basic auth of its own (only OIDC: even its basic-auth option trades the login for a token at
    a Keycloak), and TiCDC needs the front for its check anyway."""

    name = "registry-secure"
    endpoint = Endpoint("127.0.0.1", SECURE_REGISTRY_PORT)
    start_option = "--secure --registry"

    @property
    def url(self) -> str:
        """The registry's base URL (without its login)."""
        return f"https://{self.endpoint}"

    @property
    def users(self) -> Path:
        return self.home / "users"

    @property
    def config(self) -> Path:
        return self.home / "nginx.conf"

    def install(self) -> None:
        self.binary = require_binary("nginx", "nginx-light", self.log_file)

    def prepare(self) -> None:
        ca = authority()
        for folder in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.tmp_dir / folder).mkdir(exist_ok=True)
        # The password as salted SHA-1, a scheme nginx reads ({SSHA}); the file is the owner's.
        salt = secrets.token_bytes(8)
        digest = hashlib.sha1(password("registry").encode() + salt).digest()
        self.users.touch(mode=0o600)
        self.users.write_text(f"{SECURE_USER}:{{SSHA}}{base64.b64encode(digest + salt).decode()}\n")
        template = resources.files(__package__).joinpath("registry-nginx.conf").read_text()
        self.config.write_text(
            Template(template).substitute(
                user=pwd.getpwuid(os.geteuid()).pw_name,
                group=grp.getgrgid(os.getegid()).gr_name,
                home=self.home,
                tmp=self.tmp_dir,
                host=self.endpoint.host,
                port=self.endpoint.port,
                certificate=ca.server_cert,
                key=ca.server_key,
                users=self.users,
                upstream=RegistryService().url,
            )
        )

    def command(self) -> list[str]:
        # -e: nginx's own start-up errors go to the log too, not to /var/log/nginx.
        return [self.binary, "-p", str(self.home), "-c", str(self.config), "-e", "stderr"]

    def answers(self) -> bool:
        """The root answers ``{}`` over TLS, as TiCDC's check asks."""
        if not port_open(self.endpoint.host, self.endpoint.port):
            return False
        return self._get("/") == b"{}"

    def ready(self) -> bool:
        """The Confluent API answers behind the login (nginx answers ``{}`` itself)."""
        return b"compatibilityLevel" in (self._get("/config") or b"")

    def _get(self, path: str) -> bytes | None:
        login = base64.b64encode(f"{SECURE_USER}:{password('registry')}".encode()).decode()
        call = urllib.request.Request(self.url + path, headers={"Authorization": f"Basic {login}"})
        context = ssl.create_default_context(cafile=str(authority().ca))
        try:
            with urllib.request.urlopen(call, timeout=2, context=context) as answer:
                body: bytes = answer.read()
                return body
        except (OSError, ValueError):
            return None


def secure_services() -> list[LocalService]:
    """The secured services, in start order."""
    return [SecureRedisService(), SecureMariaDBService(), SecureKafkaService()]


def secure_settings() -> dict[str, str]:
    """The ``TICDC_SINK_*`` settings that reach the secured services (secrets as files)."""
    ca = authority()
    tls = {"ssl-mode": "verify-identity", "ssl-ca": ca.ca, "ssl-cert": ca.client_cert}
    query = "&".join(f"{k}={quote(str(v), safe='/')}" for k, v in tls.items())
    query += f"&ssl-key={quote(str(ca.client_key), safe='/')}"
    return {
        "TICDC_SINK_KAFKA": str(SecureKafkaService.endpoint),
        "TICDC_SINK_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "TICDC_SINK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "TICDC_SINK_KAFKA_SASL_USERNAME": SECURE_USER,
        "TICDC_SINK_KAFKA_SASL_PASSWORD_FILE": str(password_file("kafka")),
        "TICDC_SINK_KAFKA_SSL_CA": str(ca.ca),
        "TICDC_SINK_KAFKA_SSL_CERT": str(ca.client_cert),
        "TICDC_SINK_KAFKA_SSL_KEY": str(ca.client_key),
        "TICDC_SINK_REDIS_URL": f"rediss://{SECURE_USER}@{SecureRedisService.endpoint}/0",
        "TICDC_SINK_REDIS_PASSWORD_FILE": str(password_file("redis")),
        "TICDC_SINK_REDIS_SSL_CA": str(ca.ca),
        "TICDC_SINK_REDIS_SSL_CERT": str(ca.client_cert),
        "TICDC_SINK_REDIS_SSL_KEY": str(ca.client_key),
        "TICDC_SINK_DOWNSTREAM": f"mysql://{SECURE_USER}@{SecureMariaDBService.endpoint}/?{query}",
        "TICDC_SINK_DOWNSTREAM_PASSWORD_FILE": str(password_file("mariadb")),
        "TICDC_SINK_SCHEMA_REGISTRY": f"https://{SECURE_USER}@{SecureRegistryService.endpoint}",
        "TICDC_SINK_SCHEMA_REGISTRY_PASSWORD_FILE": str(password_file("registry")),
        "TICDC_SINK_SCHEMA_REGISTRY_SSL_CA": str(ca.ca),
    }


def write_secure_env() -> Path:
    """``<state dir>/secure.env``: ``source`` it to point ticdc-sink at the secured services."""
    path = state_dir() / SECURE_ENV
    lines = ["# written by `ticdc-sink services up --secure`; secrets stay in the *_FILE files"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in secure_settings().items()]
    path.write_text("\n".join(lines) + "\n")
    return path
