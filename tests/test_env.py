"""One reading of the package's environment switches: every spelling, a bad value, unset; and each
switch of the package read through it."""

from types import SimpleNamespace

import pytest
from packaging.version import Version

from sglang_eagle_ext import env
from sglang_eagle_ext.kernels import launch
from sglang_eagle_ext.sglang import plugin
from sglang_eagle_ext.sglang.compat import cpu, fused_verify, plain_off, tree_kernels

NAME = "SGLANG_EAGLE_EXT_TEST_SWITCH"


@pytest.mark.parametrize("value, expected", [
    ("1", True), ("true", True), ("on", True), ("yes", True), ("TRUE", True), (" Yes\n", True), ("On", True),
    ("0", False), ("false", False), ("off", False), ("no", False), ("FALSE", False), ("\tNO ", False), ("Off", False),
])
def test_flag_spellings(monkeypatch, value, expected):
    monkeypatch.setenv(NAME, value)
    assert env.flag(NAME, None) is expected


@pytest.mark.parametrize("value", [None, "", "  "])
def test_unset_or_empty_is_the_default(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(NAME, raising=False)
    else:
        monkeypatch.setenv(NAME, value)
    assert env.flag(NAME, None) is None and env.flag(NAME, True) is True
    assert env.choice(NAME, ("a", "b"), "b") == "b"


@pytest.mark.parametrize("value", ["2", "y", "enable", "truee", "1 0"])
def test_a_bad_flag_names_the_variable_the_value_and_the_spellings(monkeypatch, value):
    monkeypatch.setenv(NAME, value)
    with pytest.raises(env.SwitchError) as raised:
        env.flag(NAME, True)
    assert str(raised.value) == (f"{NAME}={value!r}: expected one of 1/0, true/false, on/off, yes/no (any case), "
                                 "or unset")
    assert isinstance(raised.value, ValueError)


def test_choice(monkeypatch):
    monkeypatch.setenv(NAME, " Triton ")
    assert env.choice(NAME, ("triton", "sglang"), "sglang") == "triton"
    monkeypatch.setenv(NAME, "cuda")
    with pytest.raises(env.SwitchError,
                       match=rf"^{NAME}='cuda': expected one of triton, sglang \(any case\), or unset$"):
        env.choice(NAME, ("triton", "sglang"), "sglang")


def test_text_keeps_the_value_as_given(monkeypatch):
    monkeypatch.setenv(NAME, "  /Tmp/Run Trace ")
    assert env.text(NAME) == "/Tmp/Run Trace"
    for value in ("", "   "):
        monkeypatch.setenv(NAME, value)
        assert env.text(NAME) is None
    monkeypatch.delenv(NAME)
    assert env.text(NAME) is None


# every switch of the package and the function that reads it
SWITCHES = {
    plugin.SWITCH: plugin.enabled,
    fused_verify.ENV_SWITCH: lambda: fused_verify.selected(Version("0.5.21")),
    tree_kernels.ENV_SWITCH: tree_kernels.selected_backend,
    plain_off.OFF_SWITCH: plain_off.selected,
}


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_each_switch_is_read_through_env(monkeypatch, name):
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(env.SwitchError, match=f"^{name}='maybe'"):
        SWITCHES[name]()


@pytest.mark.parametrize("name", [plugin.SWITCH, fused_verify.ENV_SWITCH])
@pytest.mark.parametrize("on, off", [("1", "0"), ("TRUE", "false"), ("on", "Off"), ("yes", " no ")])
def test_boolean_switches_take_every_spelling(monkeypatch, name, on, off):
    # the case: "no" turned the plugin off but made the fused-verify switch raise
    monkeypatch.setenv(name, on)
    assert SWITCHES[name]() is True
    monkeypatch.setenv(name, off)
    assert SWITCHES[name]() is False


@pytest.mark.parametrize("value, interpreted",
                         [("1", True), ("y", True), ("Yes", True), ("0", False), ("maybe", False)])
def test_tritons_switch_is_read_as_triton_reads_it(monkeypatch, value, interpreted):
    # TRITON_INTERPRET is Triton's, with its own spellings ("y" on, anything unknown off): the launch
    # fast path and the CPU shims follow Triton's reading rather than parse it themselves
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert launch._fast_path_available() is not interpreted
    module = SimpleNamespace(_is_cuda=False)
    cpu._route_speculative_ops_to_triton(module)
    assert getattr(module, "_is_xpu", False) is interpreted
