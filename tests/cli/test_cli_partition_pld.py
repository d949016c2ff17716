"""``--accountant`` on ``account model-split|dropout`` and ``calibrate model-split`` (issue 11)."""

import pytest

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.events import DropoutEvent, ModelSplitEvent


def test_two_blocks_default_to_the_pld_accountant_with_the_rdp_bound_beside(cli_json):
    out = cli_json("account model-split --submodels 2 --noise-multiplier 1.5 --steps 40 --delta 1e-6".split())
    assert out["accountant"] == "pld" and out["analysis"] == "theorem-3.4"
    event = ModelSplitEvent(num_submodels=2, noise_multiplier=1.5)
    assert out["epsilon"] == pytest.approx(PLDAccountant().compose(event, 40).get_epsilon(1e-6), rel=1e-12)
    rdp = RDPAccountant().compose(event, 40).get_epsilon(1e-6)
    assert out["analyses"]["rdp"]["epsilon"] == pytest.approx(rdp, rel=1e-12)
    assert out["epsilon"] < rdp < out["analyses"]["no-split"]["epsilon"]
    same = cli_json(
        "account model-split --submodels 2 --noise-multiplier 1.5 --steps 40 --delta 1e-6 "
        "--accountant rdp".split()
    )
    assert same["accountant"] == "rdp" and same["epsilon"] == pytest.approx(rdp, rel=1e-9)


def test_dropout_with_a_nonsplit_part(cli_json):
    argv = "account dropout --noise-multiplier 1.2 --nonsplit-noise-multiplier 3 --steps 20 --delta 1e-5"
    out = cli_json(argv.split())
    event = DropoutEvent(noise_multiplier=1.2, nonsplit_noise_multiplier=3.0)
    assert out["accountant"] == "pld"
    assert out["epsilon"] == pytest.approx(PLDAccountant().compose(event, 20).get_epsilon(1e-5), rel=1e-12)


def test_calibrate_model_split_pld_needs_less_noise_than_rdp(cli_json):
    out = cli_json("calibrate model-split --epsilon 1 --submodels 2 --steps 30 --delta 1e-5".split())
    assert out["accountant"] == "pld" and out["epsilon"] <= 1.0
    assert out["noise_multiplier"] < out["analyses"]["rdp"]["noise_multiplier"]
    assert out["analyses"]["rdp"]["noise_multiplier"] < out["analyses"]["no-split"]["noise_multiplier"]
    event = ModelSplitEvent(num_submodels=2, noise_multiplier=out["noise_multiplier"])
    assert PLDAccountant().compose(event, 30).get_epsilon(1e-5) <= 1.0


@pytest.mark.parametrize(
    "argv",
    [
        "account bis --iterations 5 --k 2 --noise-multiplier 1 --delta 1e-5 --bound efficient",
        "calibrate model-split --epsilon 1 --submodels 2 --steps 5 --delta 1e-5 --orders 2,3",
    ],
)
def test_pld_where_it_does_not_apply_is_one_line_exit_2(argv, run_cli):
    code, _, err = run_cli([*argv.split(), "--accountant", "pld"])
    assert code == 2 and err.startswith("ampfl: error: --accountant pld") and err.count("\n") == 1


def test_more_blocks_and_bis_take_the_mixture_pld(cli_json):
    out = cli_json("account model-split --submodels 3 --noise-multiplier 2 --steps 5 --delta 1e-5".split())
    assert out["accountant"] == "pld" and out["epsilon"] <= out["analyses"]["rdp"]["epsilon"]
    out = cli_json("account bis --iterations 5 --k 1 --noise-multiplier 2 --delta 1e-5".split())
    assert out["accountant"] == "pld" and out["analysis"] == "random-allocation-pld"
    assert out["epsilon"] <= out["analyses"]["rdp"]["epsilon"]
    out = cli_json("account bis --iterations 5 --k 2 --noise-multiplier 2 --delta 1e-5".split())
    assert out["accountant"] == "pld" and out["epsilon"] <= out["analyses"]["rdp"]["epsilon"]
    argv = "account bis --iterations 5 --k 2 --noise-multiplier 2 --delta 1e-5 --bound efficient"
    out = cli_json(argv.split())
    assert out["accountant"] == "rdp"
