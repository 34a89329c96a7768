"""Which built-in models a server serves: ``builtin_models`` / ``--builtin-model``."""

from __future__ import annotations

import pytest

from engine_backends.builtin_models import MINILM_NAME, SMOLLM2_NAME, TINY_LLAMA_NAME, builtin_models
from service.cli.commands import overrides_from_args
from service.settings.config import ConfigError, load_settings


def test_the_default_is_the_chat_model_and_minilm():
    assert load_settings().builtin_models == [SMOLLM2_NAME, MINILM_NAME]


def test_flags_pick_built_ins():
    import argparse

    from service.cli.commands import add_commands

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    args = parser.parse_args(["serve", "--builtin-model", TINY_LLAMA_NAME, "--builtin-model", MINILM_NAME])
    assert load_settings(overrides=overrides_from_args(args)).builtin_models == [TINY_LLAMA_NAME, MINILM_NAME]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["gpt-5"], "builtin_models: gpt-5: choose from smollm2-135m-instruct, xinserve-tiny-llama"),
        ([TINY_LLAMA_NAME, TINY_LLAMA_NAME], "builtin_models: name at least one model, each once"),
        ([], "builtin_models: name at least one model, each once"),
    ],
)
def test_bad_selections_are_refused_naming_the_option(names, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(overrides={"builtin_models": names})


def test_only_the_named_built_ins_are_materialised(tmp_path):
    (minilm,) = builtin_models(tmp_path, [MINILM_NAME])  # a copy: seconds, unlike the others
    assert minilm.name == MINILM_NAME and minilm.kind == "embed"
    assert minilm.engine_options["max_model_len"] == 256
    assert [p.name for p in (tmp_path / "models").iterdir()] == [minilm.path.name]
    with pytest.raises(ValueError, match="not built-in models: nope"):
        builtin_models(tmp_path, ["nope"])
