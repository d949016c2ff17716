"""``ampfl account|calibrate model-split|bis|poisson|dropout`` (paper 002): report shape, units, errors."""

import numpy as np
import pytest

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.events import GaussianEvent, ModelSplitEvent, PoissonSampledEvent
from ampfl.accounting.orders import DEFAULT_ORDERS
from ampfl.accounting.partition import (
    PARTITION_ORDERS,
    rdp_bis,
    rdp_dropout,
    rdp_model_split,
    rdp_partial_split,
)
from ampfl.accounting.rdp import epsilon_from_rdp, rdp_gaussian, rdp_poisson_gaussian

COMMON = {"epsilon", "delta", "analysis", "accountant", "noise_multiplier", "analyses"}


def _check_report(out, analysis, accountant="rdp"):
    assert COMMON <= set(out)
    assert out["analysis"] == analysis and out["accountant"] == accountant
    for entry in out["analyses"].values():
        assert {"epsilon", "delta", "sound", "note"} <= set(entry)
    assert "sigma" not in out


def test_account_model_split(cli_json):
    argv = "account model-split --submodels 3 --noise-multiplier 2 --clip 2 --steps 100 --delta 1e-5"
    out = cli_json([*argv.split(), "--orders", "2,4,8,16"])
    _check_report(out, "theorem-3.4")
    # --noise-multiplier is the multiplier (not a std); --clip only adds noise_std = z * C
    assert out["noise_multiplier"] == 2.0 and out["noise_std"] == 4.0
    expected = rdp_model_split(orders=[2, 4, 8, 16], num_submodels=3, noise_multiplier=2.0, steps=100)
    np.testing.assert_allclose(out["rdp"], expected)
    assert out["orders"] == [2, 4, 8, 16]
    ref = epsilon_from_rdp(orders=[2, 4, 8, 16], rdp=expected, delta=1e-5)
    assert out["epsilon"] == pytest.approx(ref.epsilon) and out["order"] == ref.order
    # the no-split baseline is sound and looser
    plain = epsilon_from_rdp(
        orders=[2, 4, 8, 16],
        rdp=rdp_gaussian(orders=[2, 4, 8, 16], noise_multiplier=2.0, steps=100),
        delta=1e-5,
    )
    assert out["analyses"]["no-split"]["epsilon"] == pytest.approx(plain.epsilon)
    assert out["analyses"]["no-split"]["sound"] is True
    assert out["analyses"]["no-split"]["epsilon"] > out["epsilon"]


def test_account_model_split_equals_the_rdp_accountant(cli_json):
    # the default grid: the accountant composing steps x ModelSplitEvent gives the same epsilon
    argv = "account model-split --submodels 4 --noise-multiplier 1.5 --steps 50 --delta 1e-6 --accountant rdp"
    out = cli_json(argv.split())
    acc = RDPAccountant().compose(ModelSplitEvent(num_submodels=4, noise_multiplier=1.5), 50)
    assert out["epsilon"] == pytest.approx(acc.get_epsilon(1e-6), rel=1e-12)
    assert out["orders"] == list(PARTITION_ORDERS)
    assert "noise_std" not in out  # no --clip, no absolute std


def test_account_model_split_partial(cli_json):
    argv = (
        "account model-split --submodels 8 --noise-multiplier 3 --steps 10 --delta 1e-5 "
        "--nonsplit-noise-multiplier 12 --nonsplit-clip 0.5 --bound efficient --accountant rdp"
    )
    out = cli_json(argv.split())
    expected = rdp_partial_split(
        orders=PARTITION_ORDERS,
        num_submodels=8,
        split_noise_multiplier=3.0,
        nonsplit_noise_multiplier=12.0,
        steps=10,
        bound="efficient",
    )
    np.testing.assert_allclose(out["rdp"], expected)
    assert out["nonsplit_noise_multiplier"] == 12.0 and out["nonsplit_noise_std"] == 6.0
    assert out["bound"] == "efficient"


def test_account_model_split_subsampled_lists_the_unproven_table_1_reading(cli_json):
    # 002 Table 1 setting (q = 0.25, T = 400): the paper's reading (binomial expansion) is listed with
    # sound: false; the recommended analysis is the better of the two sound ones.
    argv = "account model-split --submodels 3 --noise-multiplier 3 --steps 400 --rate 0.25 --delta 1e-5"
    out = cli_json([*argv.split(), "--orders", ",".join(str(a) for a in range(2, 65))])
    assert out["analysis"] in {"subsampled-split-zhu-wang", "subsampled-no-split"}
    names = {"subsampled-split-zhu-wang", "subsampled-no-split", "dong-as-printed"} - {out["analysis"]}
    assert set(out["analyses"]) == names
    dong = out["analyses"]["dong-as-printed"]
    assert dong["sound"] is False and "unproven" in dong["note"]
    assert dong["epsilon"] < out["epsilon"]  # the unproven reading claims less than any sound analysis
    assert all(out["analyses"][n]["epsilon"] >= out["epsilon"] for n in names if n != "dong-as-printed")
    plain = rdp_poisson_gaussian(orders=range(2, 65), sampling_rate=0.25, noise_multiplier=3.0, steps=400)
    no_split = epsilon_from_rdp(orders=range(2, 65), rdp=plain, delta=1e-5).epsilon
    got = (
        out["epsilon"] if out["analysis"] == "subsampled-no-split" else out["analyses"]["subsampled-no-split"]
    )
    assert (got if isinstance(got, float) else got["epsilon"]) == pytest.approx(no_split)


def test_account_bis_and_epochs(cli_json, run_cli):
    argv = "account bis --iterations 50 --k 1 --noise-multiplier 1 --delta 1e-5 --epochs 4 --accountant rdp"
    out = cli_json(argv.split())
    _check_report(out, "theorem-3.8")
    expected = rdp_bis(
        orders=PARTITION_ORDERS, iterations=50, participations=1, noise_multiplier=1.0, epochs=4
    )
    np.testing.assert_allclose(out["rdp"], expected)
    assert out["bound"] == "exact"
    assert out["analyses"]["no-amplification"]["epsilon"] > out["epsilon"]
    # k > 1 with many subsets: default falls back to the efficient bound; --bound exact refuses in one line
    argv = "account bis --iterations 100 --k 5 --noise-multiplier 2 --delta 1e-5 --accountant rdp"
    out = cli_json(argv.split())
    assert out["bound"] == "efficient"
    argv = "account bis --iterations 100 --k 5 --noise-multiplier 2 --delta 1e-5 --bound exact"
    code, _, err = run_cli(argv.split())
    assert code == 2 and err.startswith("ampfl: error:") and "not affordable" in err and err.count("\n") == 1


def test_account_poisson_and_dropout(cli_json):
    out = cli_json(
        "account poisson --rate 0.01 --noise-multiplier 1.1 --steps 1000 --delta 1e-5 "
        "--accountant rdp".split()
    )
    _check_report(out, "poisson-gaussian")
    assert out["orders"] == list(DEFAULT_ORDERS)  # the one grid, up to 10 000
    np.testing.assert_allclose(
        out["rdp"],
        rdp_poisson_gaussian(orders=DEFAULT_ORDERS, sampling_rate=0.01, noise_multiplier=1.1, steps=1000),
    )
    out = cli_json("account dropout --noise-multiplier 2 --steps 5 --delta 1e-5 --orders 3,2".split())
    _check_report(out, "theorem-3.7")
    np.testing.assert_allclose(out["rdp"], rdp_dropout(orders=[2, 3], noise_multiplier=2.0, steps=5))
    assert out["orders"] == [2, 3]


def test_account_poisson_pld(cli_json, run_cli):
    argv = "account poisson --rate 0.01 --noise-multiplier 1.1 --steps 100 --delta 1e-5 --accountant pld"
    out = cli_json(argv.split())
    _check_report(out, "poisson-gaussian", accountant="pld")
    event = PoissonSampledEvent(sampling_rate=0.01, event=GaussianEvent(noise_multiplier=1.1))
    assert out["epsilon"] == pytest.approx(PLDAccountant().compose(event, 100).get_epsilon(1e-5), rel=1e-12)
    rdp = cli_json(argv.replace("pld", "rdp").split())["epsilon"]
    assert out["epsilon"] < rdp  # PLD is tighter
    code, _, err = run_cli([*argv.split(), "--orders", "2,3"])
    assert code == 2 and "--orders applies to --accountant rdp only" in err


def test_account_poisson_rdp_jump_is_the_true_rdp(cli_json):
    # issue 10: RDP ~7e-4 at alpha = 96 and 71.2 at alpha = 112 is the subsampled Gaussian's true RDP
    # (dp-accounting agrees, tests/accounting/test_partition.py), not an instability
    argv = "account poisson --rate 0.001 --steps 100 --noise-multiplier 2.7 --delta 1e-5 --orders 96,112"
    out = cli_json(argv.split())
    assert out["rdp"][0] == pytest.approx(7.16e-4, rel=1e-3) and out["rdp"][1] == pytest.approx(
        71.2, rel=1e-3
    )


def test_calibrate_poisson_acceptance_example(cli_json):
    # issue 10, part 3: this printed sigma = 1000 and eps = 0.01 while `account poisson` at 1000 gave 0.0195.
    # With the one large-order grid RDP calibrates to about 5.86, and account agrees with the claim; the
    # default PLD accountant (issue 11: the tightest sound one) needs about 2.67 (issue 11: "near 2.70").
    pld = cli_json("calibrate poisson --epsilon 0.01 --delta 1e-5 --rate 0.001 --steps 100".split())
    _check_report(pld, "poisson-gaussian", accountant="pld")
    assert pld["noise_multiplier"] == pytest.approx(2.67, rel=0.01) and pld["epsilon"] <= 0.01
    argv = "calibrate poisson --epsilon 0.01 --delta 1e-5 --rate 0.001 --steps 100 --accountant rdp"
    out = cli_json(argv.split())
    _check_report(out, "poisson-gaussian")
    z = out["noise_multiplier"]
    assert z == pytest.approx(5.86, rel=0.01)
    assert out["epsilon"] <= 0.01 and out["target_epsilon"] == 0.01
    again = cli_json(
        f"account poisson --noise-multiplier {z!r} --rate 0.001 --steps 100 --delta 1e-5 "
        "--accountant rdp".split()
    )
    assert again["epsilon"] == pytest.approx(out["epsilon"], rel=1e-12) and again["epsilon"] <= 0.01
    below = cli_json(
        f"account poisson --noise-multiplier {z / 1.005!r} --rate 0.001 --steps 100 --delta 1e-5 "
        "--accountant rdp".split()
    )
    assert below["epsilon"] > 0.01  # within 0.5% of the smallest multiplier that meets the target


def test_calibrate_unreachable_target_exits_1(run_cli):
    code, out, err = run_cli(
        "calibrate poisson --epsilon 0.001 --delta 1e-10 --rate 1 --steps 1000 --json".split()
    )
    assert code == 1 and out == ""
    assert err.startswith("ampfl: numerical error:") and "unreachable" in err and err.count("\n") == 1


def test_calibrate_commands(cli_json):
    out = cli_json(
        "calibrate poisson --epsilon 8 --delta 1e-5 --rate 0.25 --steps 400 --orders 2,3,4,5,6,7,8".split()
    )
    assert out["noise_multiplier"] == pytest.approx(
        3.3197, rel=5e-3
    )  # 002 Table 1 baseline (docs/partition.md)
    orders = [2, 3, 4, 5, 6, 8, 12, 16, 24, 32]
    argv = "calibrate model-split --epsilon 4 --delta 1e-5 --submodels 3 --steps 20 --clip 2 --orders"
    out = cli_json([*argv.split(), ",".join(map(str, orders))])
    _check_report(out, "theorem-3.4")
    assert out["noise_std"] == pytest.approx(2 * out["noise_multiplier"])
    rdp = rdp_model_split(orders=orders, num_submodels=3, noise_multiplier=out["noise_multiplier"], steps=20)
    assert epsilon_from_rdp(orders=orders, rdp=rdp, delta=1e-5).epsilon == pytest.approx(out["epsilon"])
    assert out["epsilon"] <= 4.0
    assert out["analyses"]["no-split"]["noise_multiplier"] > out["noise_multiplier"]
    argv = "calibrate bis --epsilon 2 --delta 1e-5 --iterations 20 --k 1 --epochs 5 --accountant rdp"
    out = cli_json(argv.split())
    _check_report(out, "theorem-3.8")
    assert 0.1 < out["noise_multiplier"] < 20 and out["epsilon"] <= 2.0


def test_calibrate_model_split_subsampled(cli_json):
    argv = "calibrate model-split --epsilon 8 --delta 1e-5 --submodels 3 --steps 400 --rate 0.25 --orders"
    out = cli_json([*argv.split(), ",".join(str(a) for a in range(2, 65))])
    assert out["analysis"] == "subsampled-no-split"  # Zhu-Wang's factor 3 is too loose at q = 0.25
    assert out["noise_multiplier"] == pytest.approx(3.3197, rel=5e-3) and out["epsilon"] <= 8.0
    dong = out["analyses"]["dong-as-printed"]
    assert dong["sound"] is False and dong["noise_multiplier"] == pytest.approx(2.0, rel=5e-3)
    assert out["analyses"]["subsampled-split-zhu-wang"]["noise_multiplier"] == pytest.approx(17.12, rel=5e-3)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ("account model-split --submodels 0 --noise-multiplier 1 --steps 1 --delta 1e-5", "--submodels"),
        ("account model-split --submodels 3 --noise-multiplier 1 --steps 1 --delta 2", "--delta"),
        (
            "account model-split --submodels 3 --noise-multiplier -1 --steps 1 --delta 1e-5",
            "--noise-multiplier",
        ),
        ("account model-split --submodels 3 --noise-multiplier 1 --steps 1 --delta 1e-5 --clip 0", "--clip"),
        ("account model-split --submodels 3 --noise-multiplier 1 --steps 1 --delta 1e-5 --rate 2", "--rate"),
        (
            "account model-split --submodels 3 --noise-multiplier 1 --sigma 1 --steps 1 --delta 1e-5",
            "--sigma",
        ),
        ("account model-split --submodels 3 --sigma 1 --steps 1 --delta 1e-5", "--noise-multiplier"),
        ("account bis --iterations 5 --k 6 --noise-multiplier 1 --delta 1e-5", "--k"),
        ("account poisson --rate 1.5 --noise-multiplier 1 --steps 3 --delta 1e-5", "--rate"),
        (
            "account poisson --rate 0.5 --noise-multiplier 1 --steps 3 --delta 1e-5 --accountant foo",
            "--accountant",
        ),
        ("account dropout --noise-multiplier 1 --steps 3 --delta 1e-5 --orders 1,2", "--orders"),
        ("account dropout --noise-multiplier 1 --steps 3 --delta 1e-5 --orders a", "--orders"),
        (
            "account dropout --noise-multiplier 1 --steps 3 --delta 1e-5 --nonsplit-noise-multiplier 0",
            "--nonsplit",
        ),
        ("calibrate poisson --epsilon -1 --delta 1e-5 --rate 0.1 --steps 3", "--epsilon"),
        ("calibrate bis --epsilon 1 --delta 1e-5 --iterations 10 --k 0", "--k"),
        ("account model-split --noise-multiplier 1 --steps 1 --delta 1e-5", "--submodels"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, flag, run_cli):
    code, out, err = run_cli([*argv.split(), "--json"])
    assert code == 2 and out == ""
    assert err.startswith("ampfl: error:") and err.count("\n") == 1
    assert flag in err, err
