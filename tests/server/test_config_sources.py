"""How ``load_settings`` merges its sources (pydantic-settings: keyword overrides = CLI flags,
``XINSERVE_*`` environment, the ``--config`` YAML file): sections merge key by key, lists are
replaced whole, the audit paths default under ``data_dir`` unless some source sets them, and a
file that is not a YAML mapping is a ConfigError naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.settings.config import ConfigError, load_settings


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "xinserve.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_sections_merge_key_by_key_across_file_env_and_flags(tmp_path, monkeypatch):
    cfg = _file(tmp_path, "admission:\n  max_queue: 7\nengine:\n  max_num_seqs: 2\n  max_model_len: 512\n")
    monkeypatch.setenv("XINSERVE_ADMISSION__MAX_IN_FLIGHT", "5")
    monkeypatch.setenv("XINSERVE_ENGINE__MAX_NUM_SEQS", "4")
    s = load_settings(cfg, {"engine": {"max_model_len": 1024}})
    assert (s.admission.max_in_flight, s.admission.max_queue) == (5, 7)
    assert (s.engine.max_num_seqs, s.engine.max_model_len) == (4, 1024)


def test_flag_beats_environment_beats_file_for_the_same_key(tmp_path, monkeypatch):
    cfg = _file(tmp_path, "drain_grace_seconds: 1\nreflection: true\nlog_level: debug\n")
    monkeypatch.setenv("XINSERVE_DRAIN_GRACE_SECONDS", "2")
    monkeypatch.setenv("XINSERVE_REFLECTION", "false")
    s = load_settings(cfg, {"drain_grace_seconds": 3})
    assert s.drain_grace_seconds == 3
    assert s.reflection is False
    assert s.log_level == "debug"


def test_lists_are_replaced_whole(tmp_path, monkeypatch):
    cfg = _file(tmp_path, "listen:\n  plaintext: ['127.0.0.1:1', '127.0.0.1:2']\n  http: ['127.0.0.1:4']\n")
    s = load_settings(cfg, {"listen": {"plaintext": ["127.0.0.1:3"]}})
    assert s.listen.plaintext == ["127.0.0.1:3"]
    assert s.listen.http == ["127.0.0.1:4"]
    monkeypatch.setenv("XINSERVE_LISTEN__PLAINTEXT", '["127.0.0.1:5"]')
    assert load_settings(cfg).listen.plaintext == ["127.0.0.1:5"]


def test_audit_paths_default_under_data_dir_unless_a_source_sets_them(tmp_path, monkeypatch):
    data = tmp_path / "data"
    monkeypatch.setenv("XINSERVE_AUDIT__NODE_ID", "node-7")
    s = load_settings(overrides={"data_dir": str(data)})
    assert s.audit.node_id == "node-7"
    assert s.audit.path == data / "audit" / "audit.db"
    assert s.audit.signing_key_path == data / "keys" / "server-sm2.pem"

    cfg = _file(tmp_path, f"audit:\n  path: {tmp_path / 'elsewhere.db'}\n")
    s = load_settings(cfg, {"data_dir": str(data)})
    assert s.audit.path == tmp_path / "elsewhere.db"
    assert s.audit.node_id == "node-7"
    assert s.audit.signing_key_path == data / "keys" / "server-sm2.pem"


def test_empty_file_is_the_defaults(tmp_path):
    assert load_settings(_file(tmp_path, "")) == load_settings()


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_file_whose_top_level_is_not_a_mapping_is_refused(tmp_path, text):
    with pytest.raises(ConfigError, match="must hold a mapping at the top level"):
        load_settings(_file(tmp_path, text))


def test_a_directory_as_config_file_cannot_be_read(tmp_path):
    with pytest.raises(ConfigError, match="--config: cannot read"):
        load_settings(tmp_path)


def test_malformed_environment_value_is_a_config_error(monkeypatch):
    monkeypatch.setenv("XINSERVE_LISTEN__PLAINTEXT", "[not json")
    with pytest.raises(ConfigError, match="invalid configuration"):
        load_settings()


def test_unknown_key_in_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="bogus"):
        load_settings(_file(tmp_path, "admission:\n  bogus: 1\n"))
