from pathlib import Path

import pytest

from config.errors import ConfigError
from config.settings import Protocol, load_settings


def test_defaults_need_no_configuration() -> None:
    settings = load_settings(environ={})
    assert settings.kafka == "127.0.0.1:9092"
    assert settings.topics == ()
    assert settings.group == "ticdc-sink"
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert str(settings.downstream) == "mysql://root@127.0.0.1:3306/"
    assert settings.spark_master == "local[*]"
    assert settings.meta_db == "ticdc_sink"


def test_environment_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sink.toml"
    path.write_text('protocol = "craft"\ntopics = ["a", "b"]\ngroup = "from-file"\n')
    settings = load_settings(path, environ={"TICDC_SINK_GROUP": "from-env"})
    assert settings.protocol is Protocol.CRAFT
    assert settings.topics == ("a", "b")
    assert settings.group == "from-env"


def test_topics_are_a_comma_list() -> None:
    settings = load_settings(environ={"TICDC_SINK_TOPICS": " cdc-a, cdc-b ,,"})
    assert settings.topics == ("cdc-a", "cdc-b")


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("TICDC_SINK_PROTOCOL", "avro", "must be one of 'open', 'craft'"),
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
    assert settings.downstream.password.get_secret_value() == "s3cret"
    assert settings.downstream.port == 3307
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
    assert (settings.upstream, settings.claim_check_storage) == (None, "")
    assert settings.claim_check_attempts == 3
    secret = "s3://claims/cf?endpoint=http://minio:9000&secret-access-key=hush&region=x"
    settings = load_settings(
        environ={
            "TICDC_SINK_UPSTREAM": "mysql://cdc:pw@tidb:4000/",
            "TICDC_SINK_CLAIM_CHECK_STORAGE": secret,
        }
    )
    assert settings.upstream is not None and settings.upstream.port == 4000
    shown = settings.describe()
    assert shown["TICDC_SINK_UPSTREAM"] == "mysql://cdc:***@tidb:4000/"
    for text in (str(settings), repr(settings), shown["TICDC_SINK_CLAIM_CHECK_STORAGE"]):
        assert "hush" not in text
    assert "region=x" in shown["TICDC_SINK_CLAIM_CHECK_STORAGE"]
    with pytest.raises(ConfigError, match="TICDC_SINK_CLAIM_CHECK_STORAGE='gcs://b': must be"):
        load_settings(environ={"TICDC_SINK_CLAIM_CHECK_STORAGE": "gcs://b"})
    with pytest.raises(ConfigError, match=r"TICDC_SINK_UPSTREAM=\*\*\*: must start with mysql"):
        load_settings(environ={"TICDC_SINK_UPSTREAM": "tidb:4000"})
