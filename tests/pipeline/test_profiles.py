import pytest

from geofact.pipeline.profiles import Profile, load_profile
from geofact.pipeline.script import declared_parameters, expected_parameters, notebook_parameters


def test_only_declared_parameters_are_passed():
    p = Profile("x", "", defaults={"seed": 1, "device": "cpu", "other": 3}, notebooks={"nb": {"n": 5}})
    assert p.parameters_for("nb", {"seed", "n"}) == {"seed": 1, "n": 5}
    assert p.parameters_for("nb", {"n", "device"}, device="cuda") == {"n": 5, "device": "cuda"}


def test_undeclared_notebook_parameter_is_an_error():
    p = Profile("x", "", notebooks={"nb": {"typo_name": 5}})
    with pytest.raises(ValueError, match="typo_name"):
        p.parameters_for("nb", {"n"})


def test_unknown_profile_lists_the_choices(repo):
    with pytest.raises(ValueError, match="laptop"):
        load_profile("huge", repo.profiles_dir)


@pytest.mark.parametrize("profile", ["smoke", "laptop", "paper"])
def test_every_profile_fits_every_notebook(repo, profile):
    for name in repo.notebooks():
        params = expected_parameters(repo, name, profile, "cpu")
        assert set(params) <= notebook_parameters(repo, name)


def test_declared_parameters_survive_comments_with_equals_signs():
    assert declared_parameters("a = 1  # k = 2, 4\nb: int = 2\nc = [1,\n  2]\nprint(d)") == {"a", "b", "c"}
