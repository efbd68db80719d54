"""Every setting of serve is declared once (stbproxy/serve_options.py), and what is derived
from the table agrees with the typed record the engine reads (Settings): the same fields,
and the same defaults whichever front end (the command line, mitmdump's options) sets none."""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from stbproxy.errors import ConfigError
from stbproxy.serve_options import BY_OPTION, SETTINGS, addon_options, flag_of, read_options
from stbproxy.settings import Settings

ONLY_FROM_THE_ENVIRONMENT = {"rapidapi_key"}  # a secret: never an option anyone could print
NOT_AN_OPTION = {"sim_timeout"}  # set by programs that build Settings (the default serves every command)
# defaults that depend on the machine or the environment: the store's place, the open-file limit, $STBPROXY_SHARED
MACHINE_DEFAULTS = {"store", "max_connections", "shared"}


def test_the_table_and_settings_have_the_same_fields():
    table = [setting.field for setting in SETTINGS]
    assert len(table) == len(set(table))
    assert set(table) == {f.name for f in fields(Settings)} - ONLY_FROM_THE_ENVIRONMENT - NOT_AN_OPTION
    assert len(BY_OPTION) == len(SETTINGS) and all(name.startswith("stb_") for name in BY_OPTION)


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.field not in MACHINE_DEFAULTS], ids=lambda s: s.field)
def test_an_option_left_alone_gives_settings_own_default(setting):
    default = next(f for f in fields(Settings) if f.name == setting.field).default
    assert default is not MISSING
    _, addon_default, _ = setting.addon
    read = setting.read(addon_default) if setting.read else (
        tuple(addon_default) if isinstance(addon_default, list) else addon_default)
    assert read == default


def unset() -> dict:
    """What serve's command line gives each setting when no option is given (click's own parse)."""
    from stbproxy.cli.serving import _param_of, serve

    with serve.make_context("serve", []) as ctx:
        return {setting.field: ctx.params[_param_of(setting)] for setting in SETTINGS}


def test_command_line_values_reach_settings_through_the_addon_s_options(tmp_path):
    given = unset()
    given.update(mode="record", store=tmp_path / "store", secret_fields=("sig",), upstream_timeout=2.5,
                 sim_temperature=0.3, keep_status=("404,410",), max_connections=7, max_body_bytes=1024,
                 sim_concurrency=3)
    options = addon_options(given)
    assert options["stb_upstream_timeout"] == "2.5" and options["stb_secret_fields"] == ["sig"]
    assert options["stb_store"] == str(tmp_path / "store") and options["stb_prompt"] == "plain"
    settings = Settings(**read_options(options.__getitem__))
    assert (settings.mode.value, settings.store, settings.secret_fields) == ("record", tmp_path / "store", ("sig",))
    assert (settings.upstream_timeout, settings.sim_temperature, settings.keep_status) == (2.5, 0.3, (404, 410))
    assert (settings.max_connections, settings.max_body_bytes, settings.sim_concurrency) == (7, 1024, 3)


def test_a_bad_value_is_named_by_its_option_and_its_flag(tmp_path):
    options = addon_options(unset() | {"mode": "virtual", "store": tmp_path, "upstream_ca": str(tmp_path / "no.pem")})
    with pytest.raises(ConfigError) as raised:
        read_options(options.__getitem__)
    assert raised.value.setting == "stb_upstream_ca" and "no such file" in str(raised.value)
    assert flag_of("stb_upstream_ca") == "--upstream-ca" and flag_of("stb_secret_fields") == "--secret-field"
    assert flag_of("stb_store") is None and flag_of("stb_nothing") is None
    assert isinstance(read_options(lambda name: options[name] if name != "stb_upstream_ca" else None)["store"], Path)
