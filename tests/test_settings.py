"""Settings: the Orpheus part reaches the engine as one frozen config, its defaults the engine's."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipeline.engines.orpheus.config import SWITCHES, OrpheusConfig, RealtimeConfig, Switches
from pipeline.settings import Settings
from pipeline.settings_doc import groups

# The headings in docs/configuration.md (comments in Settings) over the settings an engine reads.
ENGINE_SECTIONS = ("Engine", "Orpheus engine", "Realtime streams")
# Values of each type an engine setting has, other than its default; some setting may refuse some.
SAMPLES = (
    False,
    3,
    1,
    "piper",
    "orpheus",
    "float32",
    "bfloat16",
    "fp8",
    "model",
    "cpu",
    "inline",
    "x",
    ("tara",),
    ("gc_freeze",),
)


@pytest.fixture(autouse=True)
def no_config_file(monkeypatch):
    monkeypatch.delenv("SYNTH_CONFIG", raising=False)
    monkeypatch.delenv("SYNTH_ORPHEUS_DISABLE", raising=False)


def test_default_settings_configure_the_engine_with_its_own_defaults():
    assert Settings().engine_settings().orpheus == OrpheusConfig()
    assert Settings().orpheus_config().switches == Switches()
    assert all(getattr(Switches(), name) for name in SWITCHES)


def test_every_engine_setting_reaches_the_engine_and_no_other_does():
    """A new engine setting is a Settings field under an engine heading and a field of the same
    name in EngineSettings, OrpheusConfig (orpheus_<field>) or RealtimeConfig (realtime_<field>),
    which Settings fills without a line of its own. A config field without its setting fails every
    engine_settings(); a setting without its config field fails here."""
    default = Settings().engine_settings()

    def reaches_the_engine(name: str) -> bool:
        for value in SAMPLES:
            try:
                settings = Settings(**{name: value})
            except ValidationError:
                continue
            if settings.engine_settings() != default:
                return True
        return False

    engine_settings = {e.name for g in groups() if (g.title or "").startswith(ENGINE_SECTIONS) for e in g.entries}
    assert {name for name in Settings.model_fields if reaches_the_engine(name)} == engine_settings


def test_orpheus_disable_takes_a_comma_separated_list_from_the_environment(monkeypatch):
    monkeypatch.setenv("SYNTH_ORPHEUS_DISABLE", "fused_sampler, codec_fused")
    switches = Settings().engine_settings().orpheus.switches
    assert switches == Switches(fused_sampler=False, codec_fused=False)
    monkeypatch.setenv("SYNTH_ORPHEUS_DISABLE", '["gc_freeze"]')
    assert Settings().orpheus_config().switches == Switches(gc_freeze=False)
    monkeypatch.setenv("SYNTH_ORPHEUS_DISABLE", "")
    assert Settings().orpheus_config().switches == Switches()


def test_an_unknown_switch_is_refused_with_the_choices():
    with pytest.raises(ValidationError, match="fused_sampler"):
        Settings(orpheus_disable=["cuda_graph"])
    with pytest.raises(ValueError, match="choose from"):
        Switches.without(["fused_sampler", "turbo"])


def test_zero_still_stands_for_the_default_realtime_periods():
    settings = Settings(realtime_batch_every=0, realtime_batch_every_starting=0, realtime_playing_every=0)
    assert settings.orpheus_config().realtime == RealtimeConfig()
    assert Settings(realtime_playing_every=1).orpheus_config().realtime.playing_every == 1


def test_a_realtime_config_out_of_range_is_refused():
    with pytest.raises(ValueError, match="first_lookahead"):
        RealtimeConfig(first_lookahead=3)
    with pytest.raises(ValueError, match=">= 1"):
        RealtimeConfig(playing_every=0)


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:3"])
def test_a_device_torch_names_is_taken(monkeypatch, device):
    monkeypatch.setenv("SYNTH_DEVICE", device)
    assert Settings().device == device


@pytest.mark.parametrize(
    ("value", "voices"),
    [
        ("tara", ("tara",)),
        ("tara, leah", ("tara", "leah")),
        ('["tara", "leah"]', ("tara", "leah")),
        ("", None),
    ],
)
def test_voices_take_a_comma_list_or_json_from_the_environment(monkeypatch, value, voices):
    monkeypatch.setenv("SYNTH_VOICES", value)
    assert Settings().voices == voices


def test_synth_verify_is_checked_with_the_settings_not_first_in_the_worker():
    for value in ("auto", "ALL", "sample", "off", "0.25"):
        assert Settings(verify=value).verify == value
    for value in ("bogus", "", "1.5", "-0.1"):
        with pytest.raises(ValidationError, match="give auto, all, sample"):
            Settings(verify=value)
