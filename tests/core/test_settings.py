from __future__ import annotations

from pathlib import Path

import pytest

from webhook.core.settings import NoFit, Placement, PolicyMode, Settings, SettingsError


def test_defaults() -> None:
    s = Settings.load(None)
    assert (s.policy_mode, s.placement, s.no_fit) == (
        PolicyMode.CILIUM,
        Placement.BEST_FIT,
        NoFit.PIN_MOST_FREE,
    )
    assert s.skips_namespace("kube-system") and s.skips_namespace("podium-system")
    assert not s.skips_namespace("team-a")


def test_file_with_kebab_keys(tmp_path: Path) -> None:
    path = tmp_path / "podium.yaml"
    path.write_text(
        "policy-mode: none\nplacement: most-free\nno-fit: unpinned\ntime-budget-seconds: 1.5\n"
        "excluded-namespaces: [kube-system, monitoring]\nown_namespace: podium\n"
    )
    assert Settings.load(path) == Settings(
        policy_mode=PolicyMode.NONE,
        placement=Placement.MOST_FREE,
        no_fit=NoFit.UNPINNED,
        time_budget_seconds=1.5,
        excluded_namespaces=frozenset({"kube-system", "monitoring"}),
        own_namespace="podium",
    )


def test_empty_file_is_defaults(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text("")
    assert Settings.load(tmp_path / "e.yaml") == Settings()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "must hold a mapping"),
        ("policy-mode: calico", "one of: cilium, kubernetes, none"),
        ("time-budget-seconds: 90", "between 0 and 30 seconds"),
        ("time-budget-seconds: soon", "time-budget-seconds='soon' is invalid"),
        ("excluded-namespaces: kube-system", "a list of namespace names"),
        ("zone-label: 3", "a string"),
        ("reservation-seconds: -1", "zero or more seconds"),
        ("reservation-seconds: .nan", "zero or more seconds"),
        ("orphan-grace-seconds: -5", "zero or more seconds"),
        ("reconcile-interval-seconds: 0", "between 0 and 86400 seconds"),
        ("reconcile-interval-seconds: .inf", "between 0 and 86400 seconds"),
        ("nope: 1", "unknown setting 'nope'"),
        ("a: [", "cannot read settings file"),
    ],
)
def test_bad_settings_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(SettingsError, match=message.replace("[", r"\[").replace("(", r"\(")):
        Settings.load(tmp_path / "s.yaml")
