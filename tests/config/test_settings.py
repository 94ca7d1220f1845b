import ast
import re
from pathlib import Path
from typing import TypeGuard

import pytest

import config.settings
from config.errors import ConfigError
from config.settings import SETTINGS, Protocol, Route, Settings, load_settings


def test_defaults_need_no_configuration() -> None:
    settings = load_settings(environ={})
    assert settings.kafka.bootstrap == "127.0.0.1:9092"
    assert settings.kafka.topics == ()
    assert settings.group == "ticdc-sink"
    assert settings.redis.url == "redis://127.0.0.1:6379/0"
    assert str(settings.downstream.url) == "mysql://root@127.0.0.1:3306/"
    assert settings.spark.master == "local[*]"
    assert settings.downstream.meta_db == "ticdc_sink"


def test_environment_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sink.toml"
    path.write_text('protocol = "craft"\ntopics = ["a", "b"]\ngroup = "from-file"\n')
    settings = load_settings(path, environ={"TICDC_SINK_GROUP": "from-env"})
    assert settings.kafka.protocol is Protocol.CRAFT
    assert settings.kafka.topics == ("a", "b")
    assert settings.group == "from-env"


def test_topics_are_a_comma_list() -> None:
    settings = load_settings(environ={"TICDC_SINK_TOPICS": " cdc-a, cdc-b ,,"})
    assert settings.kafka.topics == ("cdc-a", "cdc-b")


def test_topics_are_named_or_matched_by_a_valid_pattern_not_both() -> None:
    settings = load_settings(environ={"TICDC_SINK_TOPICS_PATTERN": r"tidb_shop_.*"})
    assert settings.kafka.topics_pattern == r"tidb_shop_.*"
    with pytest.raises(ConfigError, match=r"TICDC_SINK_TOPICS_PATTERN='tidb_\(': not a regular"):
        load_settings(environ={"TICDC_SINK_TOPICS_PATTERN": "tidb_("})
    both = {"TICDC_SINK_TOPICS": "a", "TICDC_SINK_TOPICS_PATTERN": "b.*"}
    with pytest.raises(
        ConfigError, match="TICDC_SINK_TOPICS and TICDC_SINK_TOPICS_PATTERN are both"
    ):
        load_settings(environ=both)


def test_the_default_topic_goes_with_the_pattern() -> None:
    both = {"TICDC_SINK_TOPICS_PATTERN": "tidb_.+", "TICDC_SINK_DEFAULT_TOPIC": "tidb"}
    assert load_settings(environ=both).kafka.default_topic == "tidb"
    with pytest.raises(ConfigError, match="TICDC_SINK_DEFAULT_TOPIC is set without"):
        load_settings(environ={"TICDC_SINK_TOPICS": "a", "TICDC_SINK_DEFAULT_TOPIC": "tidb"})
    with pytest.raises(ConfigError, match="TICDC_SINK_DEFAULT_TOPIC='a b'"):
        load_settings(environ={**both, "TICDC_SINK_DEFAULT_TOPIC": "a b"})


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("TICDC_SINK_PROTOCOL", "debezium-avro", "must be one of 'open', 'craft'"),
        ("TICDC_SINK_KAFKA", "localhost", "host:port"),
        ("TICDC_SINK_REDIS_URL", "http://x", "redis://"),
        ("TICDC_SINK_DOWNSTREAM", "postgres://a@b/", "mysql://"),
        ("TICDC_SINK_SPARK_MASTER", "local[x]", "local[*]"),
        ("TICDC_SINK_META_DB", "bad name;", "letters"),
        ("TICDC_SINK_TOPICS", "ok,not ok", "topic names"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_is_allowed(
    variable: str, value: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={variable: value})
    assert variable in str(caught.value)
    assert expected in str(caught.value)


def test_the_downstream_password_never_prints() -> None:
    settings = load_settings(environ={"TICDC_SINK_DOWNSTREAM": "mysql://app:s3cret@db:3307/"})
    assert settings.downstream.url.password.get_secret_value() == "s3cret"
    assert settings.downstream.url.port == 3307
    for text in (str(settings), repr(settings), str(settings.describe())):
        assert "s3cret" not in text
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"TICDC_SINK_DOWNSTREAM": "mysql://app:s3cret@db:99999/"})
    assert "s3cret" not in str(caught.value)


def test_a_missing_or_broken_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(tmp_path / "absent.toml", environ={})
    broken = tmp_path / "broken.toml"
    broken.write_text("protocol = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(broken, environ={})
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('colour = "blue"\n')
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        load_settings(unknown, environ={})


def test_large_message_settings() -> None:
    settings = load_settings(environ={})
    assert (settings.large_messages.upstream, settings.large_messages.claim_check_storage) == (
        None,
        "",
    )
    assert settings.large_messages.claim_check_attempts == 3
    secret = "s3://claims/cf?endpoint=http://minio:9000&secret-access-key=hush&region=x"
    settings = load_settings(
        environ={
            "TICDC_SINK_UPSTREAM": "mysql://cdc:pw@tidb:4000/",
            "TICDC_SINK_CLAIM_CHECK_STORAGE": secret,
        }
    )
    assert (
        settings.large_messages.upstream is not None
        and settings.large_messages.upstream.port == 4000
    )
    shown = settings.describe()
    assert shown["TICDC_SINK_UPSTREAM"] == "mysql://cdc:***@tidb:4000/"
    for text in (str(settings), repr(settings), shown["TICDC_SINK_CLAIM_CHECK_STORAGE"]):
        assert "hush" not in text
    assert "region=x" in shown["TICDC_SINK_CLAIM_CHECK_STORAGE"]
    with pytest.raises(ConfigError, match="TICDC_SINK_CLAIM_CHECK_STORAGE='gcs://b': must be"):
        load_settings(environ={"TICDC_SINK_CLAIM_CHECK_STORAGE": "gcs://b"})
    with pytest.raises(ConfigError, match="TICDC_SINK_UPSTREAM='tidb:4000': must start with mysql"):
        load_settings(environ={"TICDC_SINK_UPSTREAM": "tidb:4000"})


def test_each_secret_can_come_from_a_file_and_never_prints(tmp_path: Path) -> None:
    values = {}
    environ = {
        "TICDC_SINK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "TICDC_SINK_KAFKA_SASL_USERNAME": "app",
        "TICDC_SINK_REDIS_URL": "redis://app:in-url-secret@r:6379/0",
    }
    for name in ("kafka_sasl_password", "kafka_ssl_key_password", "redis_password"):
        path = tmp_path / name
        values[name] = f"{name}-s3cret"
        path.write_text(values[name] + "\n")
        environ[f"TICDC_SINK_{name.upper()}_FILE"] = str(path)
    (tmp_path / "db").write_text("db-s3cret\r\n")
    environ["TICDC_SINK_DOWNSTREAM_PASSWORD_FILE"] = str(tmp_path / "db")
    settings = load_settings(environ=environ)
    assert settings.kafka.sasl_password.get_secret_value() == "kafka_sasl_password-s3cret"
    assert settings.redis.password.get_secret_value() == "redis_password-s3cret"
    # The downstream_password setting replaces the address's password.
    assert settings.downstream.url.password.get_secret_value() == "db-s3cret"
    shown = settings.describe()
    assert shown["TICDC_SINK_KAFKA_SASL_PASSWORD"] == "***"
    assert shown["TICDC_SINK_REDIS_URL"] == "redis://app:***@r:6379/0"
    assert shown["TICDC_SINK_DOWNSTREAM"] == "mysql://root:***@127.0.0.1:3306/"
    for text in (str(settings), repr(settings), str(shown)):
        assert "s3cret" not in text
        assert "in-url-secret" not in text


def test_a_secret_and_its_file_together_or_a_missing_file_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("x")
    with pytest.raises(ConfigError, match="both set"):
        load_settings(
            environ={
                "TICDC_SINK_REDIS_PASSWORD": "a",
                "TICDC_SINK_REDIS_PASSWORD_FILE": str(path),
            }
        )
    with pytest.raises(ConfigError, match="TICDC_SINK_DOWNSTREAM_PASSWORD_FILE=/absent"):
        load_settings(environ={"TICDC_SINK_DOWNSTREAM_PASSWORD_FILE": "/absent"})


def test_a_redis_password_in_an_error_is_masked() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"TICDC_SINK_REDIS_URL": "http://u:hunter2@r/"})
    assert "hunter2" not in str(caught.value)
    assert "***" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://a@h/?worker-count=4", "unknown parameter 'worker-count'"),
        ("mysql://a@h/?ssl-mode=sometimes", "ssl-mode='sometimes' must be one of"),
        ("mysql://a@h/?ssl-mode=required&ssl-mode=disabled", "given twice"),
        ("mysql://a@h/?ssl-mode=disabled&ssl-ca=/etc/hostname", "ssl-ca need ssl-mode=required"),
        ("mysql://a@h/?ssl-mode=required&ssl-cert=/etc/hostname", "ssl-cert and ssl-key go"),
        ("mysql://a@h/?ssl-mode=verify-ca&ssl-ca=/absent.pem", "ssl-ca=/absent.pem: no such file"),
    ],
)
def test_every_downstream_parameter_is_kept_or_named_in_an_error(url: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"TICDC_SINK_DOWNSTREAM": url})
    assert "TICDC_SINK_DOWNSTREAM" in str(caught.value)
    assert expected in str(caught.value)


def test_downstream_tls_from_the_url_or_from_settings() -> None:
    from config.settings import SslMode

    url = "mysql://a:pw@h:4000/?ssl-mode=VERIFY-IDENTITY&ssl-ca=/etc/hostname"
    downstream = load_settings(environ={"TICDC_SINK_DOWNSTREAM": url}).downstream.url
    assert downstream.ssl_mode is SslMode.VERIFY_IDENTITY
    assert downstream.ssl_ca == "/etc/hostname"
    assert str(downstream) == (
        "mysql://a:***@h:4000/?ssl-mode=verify-identity&ssl-ca=/etc/hostname"
    )
    # A CA alone means verify-ca, as MySQL's client has it; a setting wins over the URL.
    alone = load_settings(environ={"TICDC_SINK_DOWNSTREAM_SSL_CA": "/etc/hostname"})
    assert alone.downstream.url.effective_ssl_mode is SslMode.VERIFY_CA
    overridden = load_settings(
        environ={"TICDC_SINK_DOWNSTREAM": url, "TICDC_SINK_DOWNSTREAM_SSL_MODE": "required"}
    )
    assert overridden.downstream.url.ssl_mode is SslMode.REQUIRED
    assert load_settings(environ={}).downstream.url.effective_ssl_mode is SslMode.PREFERRED


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {"TICDC_SINK_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            "needs TICDC_SINK_KAFKA_SASL_USERNAME",
        ),
        ({"TICDC_SINK_KAFKA_SSL_CA": "/etc/hostname"}, "need TICDC_SINK_KAFKA_SECURITY_PROTOCOL"),
        (
            {"TICDC_SINK_KAFKA_SECURITY_PROTOCOL": "SSL", "TICDC_SINK_KAFKA_SSL_CA": "/absent"},
            "TICDC_SINK_KAFKA_SSL_CA=/absent: no such file",
        ),
        ({"TICDC_SINK_KAFKA_SASL_MECHANISM": "GSSAPI"}, "TICDC_SINK_KAFKA_SASL_MECHANISM"),
        ({"TICDC_SINK_REDIS_SSL_CA": "/etc/hostname"}, "need a rediss:// TICDC_SINK_REDIS_URL"),
        (
            {
                "TICDC_SINK_REDIS_URL": "rediss://r:6380/0",
                "TICDC_SINK_REDIS_SSL_KEY": "/etc/hostname",
            },
            "TICDC_SINK_REDIS_SSL_CERT and TICDC_SINK_REDIS_SSL_KEY go together",
        ),
    ],
)
def test_kafka_and_redis_tls_settings_are_checked_whole(
    environ: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_settings(environ=environ)


def test_a_flat_file_reads_as_it_always_has_and_a_grouped_one_the_same(tmp_path: Path) -> None:
    flat = tmp_path / "flat.toml"
    flat.write_text(
        '[ticdc-sink]\nkafka = "k1:9092,k2:9092"\ntopics = "a,b"\nprotocol = "simple"\n'
        'redis-url = "redis://r:6379/1"\nmeta_db = "meta"\nspark_master = "local[2]"\n'
        'spark_min_rows = 0\nbatch_rows = 10\nlog_level = "DEBUG"\nmetrics_port = 9100\n'
        'routes = "app.*=replica.*"\nskip_tables = "app.tmp_*"\nweb_port = 0\n'
    )
    grouped = tmp_path / "grouped.toml"
    grouped.write_text(
        '[kafka]\nbootstrap = "k1:9092,k2:9092"\ntopics = ["a", "b"]\nprotocol = "simple"\n'
        '[redis]\nurl = "redis://r:6379/1"\n[downstream]\nmeta_db = "meta"\n'
        '[spark]\nmaster = "local[2]"\nmin_rows = 0\n'
        '[sink]\nbatch_rows = 10\nroutes = ["app.*=replica.*"]\nskip_tables = ["app.tmp_*"]\n'
        '[logging]\nlevel = "DEBUG"\n[metrics]\nport = 9100\n[worker]\nweb_port = 0\n'
    )
    settings = load_settings(flat, environ={})
    assert settings == load_settings(grouped, environ={})
    assert settings.kafka.bootstrap == "k1:9092,k2:9092"
    assert settings.kafka.topics == ("a", "b")
    assert settings.redis.url == "redis://r:6379/1"
    assert (settings.downstream.meta_db, settings.spark.master, settings.spark.min_rows) == (
        "meta",
        "local[2]",
        0,
    )
    assert (settings.logging.level, settings.metrics.port, settings.worker.web_port) == (
        "debug",
        9100,
        0,
    )
    assert settings.sink.routes == (Route("app.*", "replica.*"),)
    assert settings.sink.skip_tables == ("app.tmp_*",)


# Every setting of the flat model the groups replaced: users' variables and TOML keys.
FLAT_NAMES = [
    "apply_connections",
    "batch_rows",
    "batch_tables",
    "chunk_bytes",
    "chunk_rows",
    "claim_check_attempts",
    "claim_check_storage",
    "dead_letter_max_entries",
    "decode_threads",
    "default_topic",
    "downstream",
    "downstream_password",
    "downstream_ssl_ca",
    "downstream_ssl_cert",
    "downstream_ssl_key",
    "downstream_ssl_mode",
    "event_loop",
    "group",
    "held_max_messages",
    "jdbc_jar",
    "kafka",
    "kafka_sasl_mechanism",
    "kafka_sasl_password",
    "kafka_sasl_username",
    "kafka_security_protocol",
    "kafka_ssl_ca",
    "kafka_ssl_cert",
    "kafka_ssl_check_hostname",
    "kafka_ssl_key",
    "kafka_ssl_key_password",
    "load_in_place",
    "log_format",
    "log_level",
    "max_staged_bytes",
    "max_staged_rows",
    "meta_db",
    "metrics_host",
    "metrics_port",
    "on_ddl_error",
    "on_error",
    "on_row_error",
    "on_schema_drift",
    "progress_interval",
    "protocol",
    "redis_cluster",
    "redis_min_replicas",
    "redis_password",
    "redis_ssl_ca",
    "redis_ssl_cert",
    "redis_ssl_key",
    "redis_url",
    "resolve_when_idle",
    "routes",
    "schema_registry",
    "schema_registry_password",
    "schema_registry_ssl_ca",
    "schema_registry_ssl_cert",
    "schema_registry_ssl_key",
    "session_timeout",
    "skip_tables",
    "spark_master",
    "spark_min_rows",
    "split_large_txn",
    "startup_timeout",
    "stop_timeout",
    "topics",
    "topics_pattern",
    "upstream",
    "web_port",
]


def test_every_variable_keeps_its_name() -> None:
    assert sorted(doc.name for doc in SETTINGS) == FLAT_NAMES
    for doc in SETTINGS:
        assert doc.variable == "TICDC_SINK_" + doc.name.upper()


def test_a_setting_given_flat_and_grouped_or_unknown_in_a_group_is_refused(
    tmp_path: Path,
) -> None:
    twice = tmp_path / "twice.toml"
    twice.write_text("batch_rows = 5\n[sink]\nbatch_rows = 6\n")
    with pytest.raises(ConfigError, match="batch_rows is set twice"):
        load_settings(twice, environ={})
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('[sink]\ncolour = "blue"\n')
    with pytest.raises(ConfigError, match=r"unknown setting 'colour' in \[sink\]"):
        load_settings(unknown, environ={})


def test_a_grouped_secret_can_come_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret\n")
    config = tmp_path / "sink.toml"
    config.write_text(f'[redis]\npassword_file = "{tmp_path / "pw"}"\n')
    assert load_settings(config, environ={}).redis.password.get_secret_value() == "s3cret"


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("TICDC_SINK_ROUTES", "app.a=b.c,broken", "TICDC_SINK_ROUTES='app.a=b.c,broken': 'broken'"),
        ("TICDC_SINK_ROUTES", "app.a=bc", "'app.a=bc' is not db.table=db.table"),
    ],
)
def test_a_bad_route_is_named_with_its_setting(variable: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_settings(environ={variable: value})


def test_routes_and_skipped_tables_are_typed_values() -> None:
    settings = load_settings(
        environ={
            "TICDC_SINK_ROUTES": " app.orders = arch.orders_v2 ,, app.*=replica.* ",
            "TICDC_SINK_SKIP_TABLES": "app.tmp_*, ,x.y",
        }
    )
    assert settings.sink.routes == (
        Route("app.orders", "arch.orders_v2"),
        Route("app.*", "replica.*"),
    )
    assert settings.sink.skip_tables == ("app.tmp_*", "x.y")
    shown = settings.describe()
    assert shown["TICDC_SINK_ROUTES"] == "app.orders=arch.orders_v2,app.*=replica.*"
    assert shown["TICDC_SINK_SKIP_TABLES"] == "app.tmp_*,x.y"


def test_updated_changes_settings_by_name_and_validates() -> None:
    settings = load_settings(environ={})
    changed = settings.updated({"group": "other", "spark_min_rows": 0, "routes": "a.b=c.d"})
    assert (changed.group, changed.spark.min_rows) == ("other", 0)
    assert changed.sink.routes == (Route("a.b", "c.d"),)
    assert settings.spark.min_rows == 50_000
    with pytest.raises(ConfigError, match="TICDC_SINK_BATCH_ROWS=0"):
        settings.updated({"batch_rows": 0})
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        settings.updated({"colour": "blue"})
    # A setting's name is no field of the grouped model: model_copy refuses it.
    with pytest.raises(TypeError, match="updated"):
        Settings.model_copy(settings, update={"meta_db": "x"})


def _declares_setting(statement: ast.stmt) -> TypeGuard[ast.AnnAssign]:
    """A field with a default of its own (a group's field has a default_factory)."""
    if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.value, ast.Call):
        return False
    call = statement.value
    is_field = isinstance(call.func, ast.Name) and call.func.id == "Field"
    return is_field and any(keyword.arg == "default" for keyword in call.keywords)


def test_every_default_has_its_reason_right_above_it() -> None:
    """A comment right above each setting's field says why its default is that."""
    source = Path(config.settings.__file__).read_text()
    lines = source.splitlines()
    fields = [
        (node.name, statement)
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef)
        for statement in node.body
        if _declares_setting(statement)
    ]
    assert len(fields) == len(SETTINGS)
    missing = [
        f"{group}.{ast.unparse(statement.target)}"
        for group, statement in fields
        if not lines[statement.lineno - 2].strip().startswith("#")
    ]
    assert missing == []
