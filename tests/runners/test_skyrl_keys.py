"""The list of SkyRL's config fields that `ctu validate` checks `backend.skyrl_overrides` against."""

from __future__ import annotations

from ctu.backends.skyrl.keys import KEYS_FILE, is_skyrl_config_key, live_skyrl_config_keys


def test_the_key_list_matches_the_installed_skyrl():
    listed = KEYS_FILE.read_text(encoding="utf-8").splitlines()
    assert listed == live_skyrl_config_keys(), "SkyRL's config changed: run `python -m ctu.backends.skyrl.keys` and review the diff"


def test_fields_and_keys_inside_free_form_mappings_are_accepted():
    assert is_skyrl_config_key("trainer.policy.sequence_parallel_size")
    assert is_skyrl_config_key("generator.inference_engine.engine_init_kwargs.enable_auto_tool_choice")
    assert not is_skyrl_config_key("trainer.epochz")
    assert not is_skyrl_config_key("trainer.policy.sequence_parallel_size.extra")
