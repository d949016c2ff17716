"""Smoke tests of bench/: every script imports against today's API and runs at a tiny size.

Benchmarks are never timed here (they print their own numbers); these only catch a script that drifted from
the code it measures. Each script runs in this process (``main(argv)``, output read with ``capsys``), at a
size that costs well under a second or two: its own small options where it has them (``--smoke``,
``--quick``, size flags), else the test shrinks the module's setting lists. The scripts that deploy real
Flower federations or time fresh ``ampfl`` processes run their in-process parts around fake measurements.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))

Loader = Callable[[str], ModuleType]


def _load(script: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # scripts import their siblings, as when run from bench/
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)  # the scripts run only under __main__
    return module


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_bench_script_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if script.stem == "opacus":
        pytest.importorskip("opacus")
    if script.stem in {"deploy", "flower_workload"}:
        pytest.importorskip("flwr")
    _load(script, monkeypatch)


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loader]:
    """Load ``bench/<name>.py``; afterwards put back what the scripts change for the process: torch's
    threads, the environment, the warning filters, the sibling modules they import by plain name and open
    figures."""
    import torch

    threads, environ, modules = torch.get_num_threads(), dict(os.environ), set(sys.modules)
    monkeypatch.setenv("AMPFL_NO_NETWORK", "1")  # a missing dataset falls back or fails, never downloads
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    with warnings.catch_warnings():
        yield lambda name: _load(BENCH / f"{name}.py", monkeypatch)
    torch.set_num_threads(threads)
    os.environ.clear()
    os.environ.update(environ)
    for name in set(sys.modules) - modules:
        if Path(getattr(sys.modules[name], "__file__", None) or "/").parent == BENCH:
            del sys.modules[name]
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def _row(out: str, start: str) -> list[str]:
    """The cells of the first markdown row of ``out`` that starts with ``start``."""
    line = next(line for line in out.splitlines() if line.startswith(start))
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _number(cell: str) -> float:
    return float(cell.split()[0].rstrip("×x"))


# --- accounting -------------------------------------------------------------------------------------------


def test_accounting_figures(
    bench: Loader, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = bench("accounting_figures")
    (ms_pafl,) = (x for x in m.MECHANISMS if x.slug == "ms_pafl")  # its reference is a closed form: cheap
    monkeypatch.setattr(m, "MECHANISMS", (dataclasses.replace(ms_pafl, steps=2, targets=(2.0,)),))
    m.main(["--out", str(tmp_path)])
    cells = _row(capsys.readouterr().out, "| MS-PAFL")
    assert _number(cells[2]) > 0 and _number(cells[3]) > 0  # ε RDP, ε PLD
    assert (tmp_path / "ms_pafl.png").stat().st_size > 0


def test_accounting_numbers(bench: Loader, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    m = bench("accounting_numbers")
    snap = tmp_path / "snap.json"
    m.main(
        [
            "--out",
            str(snap),
            "--only",
            "pm-sfl-smashed",
            "--compare",
            str(snap),
            "--markdown",
            str(tmp_path / "t.md"),
        ]
    )
    entry = json.loads(snap.read_text())["pm-sfl-smashed"]
    assert entry["rc"] == 0 and entry["numbers"]
    cells = _row(capsys.readouterr().out, "| `pm-sfl-smashed`")
    assert int(cells[1]) > 0 and cells[2] == "0"  # numbers, none changed against itself


def test_allocation_pld(bench: Loader, capsys: pytest.CaptureFixture[str]) -> None:
    bench("allocation_pld").main(["--smoke"])
    out = capsys.readouterr().out
    assert _number(_row(out, "| 3 | 2 |")[4]) >= 1.0  # RDP ÷ PLD, one application
    assert _number(_row(out, "| 10 | 1 | 1 |")[3]) > 0  # ε BIS PLD
    assert "## Model splitting composed over steps" in out


def test_partition(
    bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    m = bench("partition")
    monkeypatch.setattr(m, "REPEATS", 1)
    monkeypatch.setattr(m, "ORDERS", list(range(2, 9)))
    m.main()
    out = capsys.readouterr().out
    assert "1 repeats" in out and "calibrate model-split d=8 T=1000" in out


def test_pld_grid(bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's cases against today's API (defined, one of them run), and the table from two fake trees
    (no ``git archive``, no fresh interpreters)."""
    m = bench("pld_grid")
    namespace: dict[str, object] = {}
    exec(m.WORKER.split("times, values = {}, {}")[0], namespace)  # imports and the cases, not the timing
    cases = namespace["CASES"]
    assert isinstance(cases, dict) and len(cases) > 5
    value = cases["gaussian_epsilon x20 (eps search)"]()
    fake = {
        "old": ({"gaussian": 0.002}, {"gaussian": value}),
        "new": ({"gaussian": 0.001}, {"gaussian": value}),
    }
    monkeypatch.setattr(m, "_extract", lambda commit, into: Path(commit))
    monkeypatch.setattr(m, "_run", lambda src: fake[str(src)])
    m.main(["--old", "old", "--new", "new", "--rounds", "1"])
    assert _row(capsys.readouterr().out, "| gaussian |") == ["gaussian", "2.0", "1.0", "0.50", "identical"]


def test_pld_partition(bench: Loader, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bench("pld_partition").main(["--smoke", "--figure", str(tmp_path / "split.png")])
    out = capsys.readouterr().out
    assert _number(_row(out, "| split d=2 | 5 | 1 |")[6]) >= 1.0  # RDP ÷ PLD
    assert _number(_row(out, "| 0.5 | 1e-05 | 1 |")[3]) > 0  # z PLD
    assert (tmp_path / "split.png").stat().st_size > 0


def test_pld_poisson_accuracy(
    bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    m = bench("pld_poisson_accuracy")
    monkeypatch.setattr(m, "grid", lambda quick: [(0.1, 2.0, 1, 1e-3)])
    monkeypatch.setattr(m, "FINE", 1e-3)  # the reference's fine grid is what costs
    m.main([])
    out = capsys.readouterr().out
    assert _number(_row(out, "| 0.1 | 2 | 1 |")[4]) > 0
    assert "worst |ampfl ÷ reference − 1|" in out


def test_pld_speed(
    bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import functools
    import types

    m = bench("pld_speed")
    coarse = functools.partial(m.pld_privacy_accountant.PLDAccountant, value_discretization_interval=1e-2)
    monkeypatch.setattr(m, "pld_privacy_accountant", types.SimpleNamespace(PLDAccountant=coarse))  # the cost
    monkeypatch.setattr(m, "STEPS", 10)
    monkeypatch.setattr(m, "LOCAL", 10)
    monkeypatch.setattr(m, "POISSON", m.POISSON[:1])
    monkeypatch.setattr(m, "CHECKIN", m.CHECKIN[:1])
    m.main([])
    out = capsys.readouterr().out
    assert _number(_row(out, "| Poisson, T = 10")[4]) > 0  # z ampfl
    assert _number(_row(out, "| random check-in wcs, T = 10")[4]) > 0


def test_pld_subsampled_split(
    bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    m = bench("pld_subsampled_split")
    monkeypatch.setattr(m, "SETTINGS", [(2, 0.05, 1.0, 100, 1e-5)])
    monkeypatch.setattr(m, "TARGETS", [(2, 2.0, 1e-5, 0.05, 100)])
    m.main(["--quick"])
    out = capsys.readouterr().out
    assert _number(_row(out, "| 2 | 0.05 | 1 | 100 |")[8]) >= 1.0  # best RDP ÷ PLD
    assert _number(_row(out, "| 2 | 2 | 1e-05 | 0.05 | 100 |")[5]) > 0  # z PLD


def test_random_checkin(
    bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    m = bench("random_checkin")
    monkeypatch.setattr(m, "REPEATS", 1)
    monkeypatch.setattr(m, "GRID", m.GRID[:1])
    monkeypatch.setattr(m, "TARGETS", m.TARGETS[-1:])
    m.main()
    out = capsys.readouterr().out
    assert out.startswith("analysis") and "worst calibration time per analysis" in out
    assert "wcs composed calibration, T = 1000, pld: z = " in out


def test_random_checkin_ratio(
    bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    m = bench("random_checkin_ratio")
    monkeypatch.setattr(m, "single_settings", lambda quick: [(0.5, 0.5, 2, 1.0, 1, 1e-5)])
    m.main(["--single-only"])
    cells = _row(capsys.readouterr().out, "| 0.5 | 0.5 | 2 | 1 | 1 |")
    assert _number(cells[11]) >= 1.0  # wcs ÷ after: a sound bound is never below an explicit dataset


def test_startup(bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two of the rows (the interpreter's floor and ``ampfl --version``), one repeat."""
    m = bench("startup")
    ours = m._ours
    monkeypatch.setattr(
        m, "_ours", lambda ampfl: [r for r in ours(ampfl) if r[0] in {"python -c pass", m.VERSION}]
    )
    m.main(["1"])
    out = capsys.readouterr().out
    assert out.startswith("1 repeats, interleaved")
    assert "ampfl --version" in out and "python -c pass" in out


# --- the simulator ----------------------------------------------------------------------------------------


def test_scale(bench: Loader, capsys: pytest.CaptureFixture[str]) -> None:
    bench("scale").main(["--clients", "1000"])
    out = capsys.readouterr().out
    assert out.startswith("N = 1000 clients")
    assert "first round (partition + set-up + round 0)" in out and "peak resident memory" in out


def test_scale_against_k(bench: Loader, capsys: pytest.CaptureFixture[str]) -> None:
    rows = bench("scale").rounds_against_k([20, 10], ["logreg"], "fedavg", 4, 1)
    assert [r["K"] for r in rows] == [10, 20]  # ascending, each timed at least 3 times
    assert rows[0]["cpu_ms"] > 0 and rows[1]["ratio"] == rows[1]["cpu_ms"] / rows[0]["cpu_ms"]
    assert "logreg K=     20" in capsys.readouterr().out


def test_compare(bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    m = bench("compare")
    monkeypatch.setattr(m, "DATASET", {"logreg": "digits"})  # bundled with scikit-learn
    m.main(
        ["--models", "logreg", "--ks", "2", "--rounds", "1", "--repeats", "1", "--steady", "2", "--no-flower"]
    )
    out = capsys.readouterr().out
    for dp in ("no", "yes"):
        cells = _row(out, f"| logreg | 2 | {dp} |")
        assert _number(cells[3]) > 0 and _number(cells[5]) > 0  # ampfl s, ampfl ÷ central


def test_engine(bench: Loader, capsys: pytest.CaptureFixture[str]) -> None:
    m = bench("engine")
    m.main(["--models", "logreg", "--ks", "2", "--steps", "1", "--batch", "2", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "logreg (000 Eq. 21" in out and "logreg K=    2  vectorised" in out


def test_eval_every(bench: Loader, capsys: pytest.CaptureFixture[str]) -> None:
    bench("eval_every").main(["1", "--rounds", "2", "--accountants", "rdp"])
    out = capsys.readouterr().out
    assert out.startswith("2 rounds, 1 repeats") and "rdp: eval_every=1 " in out and "ratio" in out


def test_threads(bench: Loader, capsys: pytest.CaptureFixture[str]) -> None:
    bench("threads").main(["1", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "logreg K=100 (dp_fedavg): median wall 1 thread" in out
    assert "mlp K=10 (fedavg): median wall 1 thread" in out


def test_device_identity(
    bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's part (one case, in this process); not the comparison with another commit's ``src/``."""
    m = bench("device_identity")
    monkeypatch.setattr(m, "CASES", {"dp_fedavg": m.CASES["dp_fedavg"]})
    assert m.main(["--child", "cpu"]) == 0
    lines = json.loads(capsys.readouterr().out)
    assert list(lines) == ["dp_fedavg"] and lines["dp_fedavg"]


def test_gpu_check_dry_run(
    bench: Loader, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--gpu-device cpu``: the script's dry run without a GPU (the CPU against itself)."""
    m = bench("gpu_check")
    monkeypatch.setattr(sys.modules["compare"], "DATASET", {"logreg": "digits"})
    argv = ["--models", "logreg", "--ks", "2", "--rounds", "1", "--repeats", "1", "--cpu-threads", "1"]
    assert (
        m.main([*argv, "--no-dp", "--reproduction", "", "--gpu-device", "cpu", "--out", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    assert "DRY RUN (cpu vs cpu)" in out
    assert _number(_row(out, "| logreg | 2 | no |")[3]) > 0  # CPU s/round
    assert "| logreg | 2 | no |" in (tmp_path / "gpu_check.md").read_text()
    assert json.loads((tmp_path / "gpu_check.json").read_text())["rows"][0]["K"] == 2


def test_gpu_check_sh() -> None:
    script = BENCH / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 2 and "usage: bench/gpu_check.sh prepare | run" in done.stderr


def test_demo(
    bench: Loader, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table from fresh ``python -c pass`` processes in place of the demo's commands (minutes)."""
    m = bench("demo")
    rows = m._rows(tmp_path)
    assert set(rows) == {"table only", "demo", "accounting-demo"}
    compile(rows["table only"][2], "table only", "exec")
    monkeypatch.setattr(m, "_rows", lambda out: {name: [sys.executable, "-c", "pass"] for name in rows})
    m.main(1)
    out = capsys.readouterr().out
    assert _row(out, "| table only |")[2] == "1.00x"
    assert "make demo (demo + accounting-demo): median" in out


def test_opacus(bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("opacus")
    m = bench("opacus")
    monkeypatch.setattr(m, "DATASET", {"logreg": "digits"})
    m.main(["--models", "logreg", "--repeats", "1", "--before-repeats", "1", "--steps", "1", "--seeds", "1"])
    out = capsys.readouterr().out
    assert _row(out, "| opacus |")[2] == "1.00"
    assert _number(_row(out, "| ampfl |")[1]) > 0 and "accuracy after 1 steps, ampfl: " in out


# --- Flower ----------------------------------------------------------------------------------------------


def test_secagg_reply_time(
    bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("flwr")
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):  # the script sets them as flwr-clientapp does
        monkeypatch.setattr(TaskIdentity, name, getattr(TaskIdentity, name, None), raising=False)
    bench("secagg_reply_time").main(["--calls", "3", "--models", "logreg"])
    out = capsys.readouterr().out
    assert "logreg   joined   n=" in out and "logreg   median ratio joined / declined:" in out


def test_flower_workload(bench: Loader) -> None:
    """Builds the simulation (the ClientApp and ServerApp); running it needs ray and real processes."""
    pytest.importorskip("flwr")
    import torch

    m = bench("flower_workload")
    assert isinstance(m.flower_available(), bool)
    x, y = torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)
    run = m.flower_run(
        lambda: torch.nn.Linear(3, 2), x, y, [torch.arange(2), torch.arange(2, 4)], 1, lambda _: 0.0
    )
    assert callable(run)


def test_deploy(
    bench: Loader, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table from fake messages in place of the local federations (tens of seconds each), and the
    pieces the federation runs: the CPU-recording wrapper and the minimal ClientApp."""
    pytest.importorskip("flwr")
    m = bench("deploy")
    wrapper = m._wrapper_dir(tmp_path / "bin") / "flwr-clientapp"
    compile(wrapper.read_text(), str(wrapper), "exec")
    compile(m._MINIMAL.format(dim=7), "minimal_client.py", "exec")
    pss, rss = m._memory_kb(os.getpid())
    assert 0 < pss <= rss
    cpu = {"minimal": 0.5, "ampfl": 1.0, "ampfl-nocache": 2.0}

    def fake(
        name: str, config_path: Path, workdir: Path, timeout: float
    ) -> list[tuple[str, float, int, float]]:
        assert config_path.is_file()
        return [("query", 3.0, 200_000, 2.0), ("train", cpu[name], 100 * 1024, 1.5)]

    monkeypatch.setattr(m, "run_contender", fake)
    m.main(["--repeats", "1", "--nocache"])
    out = capsys.readouterr().out
    assert out.startswith("config: examples/flower_dp_fedavg.toml")
    assert _row(out, "| ampfl |")[1:4] == ["1", "1.00", "2.00x"]
    assert _row(out, "| ampfl-nocache |")[3] == "4.00x"


def test_client_decline(
    bench: Loader, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nodes' caches built in this process; each message's fresh process (a second or more) faked."""
    pytest.importorskip("flwr")
    m = bench("client_decline")
    monkeypatch.setattr(
        m, "message", lambda source, run_config, folder, cohort, dim: (1 in cohort, 0.25 + cohort[-1] / 4)
    )
    m.main(["--algorithm", "fedavg", "--repeats", "1"])
    out = capsys.readouterr().out
    assert out.startswith("fedavg: CPU-s per message, median of 1")
    assert _row(out, "| tree |") == ["tree", "0.75", "0.50", "1.50"]


def test_flower_ratio(
    bench: Loader, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workload's config loads and the table is built, around fake timings of the fresh processes."""
    from ampfl.fl.config import load_config

    m = bench("flower_ratio")
    path = tmp_path / "workload.toml"
    path.write_text(m.config_toml(3, 10, 2, "digits"))
    config = load_config(path)
    assert config.rounds == 3
    commands = m.rows(tmp_path, 3, 10, 2, "digits", True)
    assert "--no-plots" in commands["ampfl run --no-plots"] and "--flower-child" in commands["flower"]

    def fake(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
        seconds = 1.0 if "-c" in argv else 2.0 if "--no-plots" in argv else 3.0
        return seconds, seconds

    monkeypatch.setattr(m, "timed", fake)
    m.main(["--rounds", "3", "--clients", "10", "--cohort", "2", "--dataset", "digits", "--repeats", "1",
            "--no-flower"])  # fmt: skip
    out = capsys.readouterr().out
    assert _row(out, "| ampfl run |")[1:3] == ["3.00", "1.50×"]
