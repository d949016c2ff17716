"""``ampfl account|calibrate model-split|bis|poisson|dropout`` (paper 002): JSON keys, values, errors."""

import json

import numpy as np
import pytest

from ampfl.accounting.partition import rdp_bis, rdp_dropout, rdp_model_split, rdp_partial_split
from ampfl.accounting.rdp import DEFAULT_ORDERS, epsilon_from_rdp, rdp_poisson_gaussian
from ampfl.cli import main


def _run(argv, capsys):
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_account_model_split(capsys):
    out = _run(
        [
            "account",
            "model-split",
            "--submodels",
            "3",
            "--sigma",
            "4",
            "--clip",
            "2",
            "--steps",
            "100",
            "--delta",
            "1e-5",
            "--orders",
            "2,4,8,16",
        ],
        capsys,
    )
    assert {"epsilon", "order", "orders", "rdp"} <= set(out)
    expected = rdp_model_split(orders=[2, 4, 8, 16], num_submodels=3, noise_multiplier=2.0, steps=100)
    np.testing.assert_allclose(out["rdp"], expected)
    assert out["orders"] == [2, 4, 8, 16]
    ref = epsilon_from_rdp(orders=[2, 4, 8, 16], rdp=expected, delta=1e-5)
    assert out["epsilon"] == pytest.approx(ref.epsilon) and out["order"] == ref.order


def test_account_model_split_partial(capsys):
    out = _run(
        [
            "account",
            "model-split",
            "--submodels",
            "8",
            "--sigma",
            "3",
            "--steps",
            "10",
            "--delta",
            "1e-5",
            "--nonsplit-sigma",
            "6",
            "--nonsplit-clip",
            "0.5",
            "--bound",
            "efficient",
        ],
        capsys,
    )
    expected = rdp_partial_split(
        orders=DEFAULT_ORDERS,
        num_submodels=8,
        split_noise_multiplier=3.0,
        nonsplit_noise_multiplier=12.0,
        steps=10,
        bound="efficient",
    )
    np.testing.assert_allclose(out["rdp"], expected)
    assert out["orders"] == list(DEFAULT_ORDERS)


def test_account_bis_and_epochs(capsys):
    out = _run(
        [
            "account",
            "bis",
            "--iterations",
            "50",
            "--k",
            "1",
            "--sigma",
            "1",
            "--delta",
            "1e-5",
            "--epochs",
            "4",
        ],
        capsys,
    )
    expected = rdp_bis(orders=DEFAULT_ORDERS, iterations=50, participations=1, noise_multiplier=1.0, epochs=4)
    np.testing.assert_allclose(out["rdp"], expected)
    assert out["bound"] == "exact"
    # k > 1 with many subsets: default falls back to the efficient bound; --bound exact refuses in one line
    out = _run(
        ["account", "bis", "--iterations", "100", "--k", "5", "--sigma", "2", "--delta", "1e-5"], capsys
    )
    assert out["bound"] == "efficient"
    code = main(
        [
            "account",
            "bis",
            "--iterations",
            "100",
            "--k",
            "5",
            "--sigma",
            "2",
            "--delta",
            "1e-5",
            "--bound",
            "exact",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("ampfl: error:") and "not affordable" in err and err.count("\n") == 1


def test_account_poisson_and_dropout(capsys):
    out = _run(
        ["account", "poisson", "--rate", "0.01", "--sigma", "1.1", "--steps", "1000", "--delta", "1e-5"],
        capsys,
    )
    np.testing.assert_allclose(
        out["rdp"],
        rdp_poisson_gaussian(orders=DEFAULT_ORDERS, sampling_rate=0.01, noise_multiplier=1.1, steps=1000),
    )
    out = _run(
        ["account", "dropout", "--sigma", "2", "--steps", "5", "--delta", "1e-5", "--orders", "3,2"], capsys
    )
    np.testing.assert_allclose(out["rdp"], rdp_dropout(orders=[2, 3], noise_multiplier=2.0, steps=5))
    assert out["orders"] == [2, 3]


def test_calibrate_commands(capsys):
    out = _run(
        ["calibrate", "poisson", "--epsilon", "8", "--delta", "1e-5", "--rate", "0.25", "--steps", "400"],
        capsys,
    )
    assert out["sigma"] == pytest.approx(3.3197, abs=1e-3)  # 002 Table 1 baseline setting (docs/partition.md)
    out = _run(
        [
            "calibrate",
            "model-split",
            "--epsilon",
            "4",
            "--delta",
            "1e-5",
            "--submodels",
            "3",
            "--steps",
            "20",
            "--clip",
            "2",
            "--orders",
            "2,3,4,5,6,8,12,16,24,32",
        ],
        capsys,
    )
    assert out["sigma"] == pytest.approx(2 * out["noise_multiplier"])
    rdp = rdp_model_split(
        orders=[2, 3, 4, 5, 6, 8, 12, 16, 24, 32],
        num_submodels=3,
        noise_multiplier=out["noise_multiplier"],
        steps=20,
    )
    assert epsilon_from_rdp(orders=[2, 3, 4, 5, 6, 8, 12, 16, 24, 32], rdp=rdp, delta=1e-5).epsilon <= 4.0
    out = _run(
        [
            "calibrate",
            "bis",
            "--epsilon",
            "2",
            "--delta",
            "1e-5",
            "--iterations",
            "20",
            "--k",
            "1",
            "--epochs",
            "5",
        ],
        capsys,
    )
    assert 0.1 < out["sigma"] < 20


@pytest.mark.parametrize(
    "argv",
    [
        ["account", "model-split", "--submodels", "0", "--sigma", "1", "--steps", "1", "--delta", "1e-5"],
        ["account", "model-split", "--submodels", "3", "--sigma", "1", "--steps", "1", "--delta", "2"],
        ["account", "model-split", "--submodels", "3", "--sigma", "-1", "--steps", "1", "--delta", "1e-5"],
        ["account", "bis", "--iterations", "5", "--k", "6", "--sigma", "1", "--delta", "1e-5"],
        ["account", "poisson", "--rate", "1.5", "--sigma", "1", "--steps", "3", "--delta", "1e-5"],
        ["account", "dropout", "--sigma", "1", "--steps", "3", "--delta", "1e-5", "--orders", "1,2"],
        ["account", "dropout", "--sigma", "1", "--steps", "3", "--delta", "1e-5", "--orders", "a"],
        ["calibrate", "poisson", "--epsilon", "-1", "--delta", "1e-5", "--rate", "0.1", "--steps", "3"],
        ["account", "model-split", "--sigma", "1", "--steps", "1", "--delta", "1e-5"],
    ],
)
def test_bad_input_is_one_line_exit_2(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ampfl: error:")
    assert err.count("\n") == 1
