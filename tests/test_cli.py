"""The ``jaxrdp`` command line: values, JSON output, one-line errors with exit status 2."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import conftest
import jaxrdp
from jaxrdp import cli, sweep

RUN = ["--dataset-size", "60000", "--batch-size", "256", "--epochs", "15"]


@pytest.fixture(autouse=True)
def _no_persistent_cache_in_process(monkeypatch):
    # cli.main() run in this process would otherwise switch JAX's persistent cache on for
    # the rest of the test session; the cache itself is tested in subprocesses below.
    monkeypatch.setenv(cli.NO_CACHE_VARIABLE, "1")


def _json(capsys, argv):
    code = cli.main(argv + ["--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_epsilon_in_practitioners_words_matches_the_library(capsys):
    r = _json(capsys, ["epsilon", *RUN, "--noise-multiplier", "1.1"])
    q, steps, delta = 256 / 60000, math.ceil(15 * 60000 / 256), 1 / 60000**2
    eps, order = jaxrdp.epsilon(q, 1.1, steps, delta)
    assert r["steps"] == steps and r["q"] == q and r["delta"] == delta
    assert r["epsilon"] == pytest.approx(float(eps), rel=1e-12)
    assert r["order"] == float(order)
    # the tight ε beside it by default; dp_accounting's PLD (pessimistic, 1e-4) gives
    # 1.8310188 here, RDP 2.2350522
    assert r["profile_status"] == "tight"
    assert 1.8309 < r["epsilon_profile"] <= 1.8310188
    only = _json(capsys, ["epsilon", *RUN, "--noise-multiplier", "1.1", "--rdp-only"])
    assert "epsilon_profile" not in only and only["epsilon"] == r["epsilon"]


def test_epsilon_with_q_and_steps(capsys):
    r = _json(capsys, ["epsilon", "--q", "0.01", "--sigma", "1.1", "--steps", "1000", "--delta", "1e-5",
                       "--rdp-only"])
    assert r["epsilon"] == pytest.approx(float(jaxrdp.epsilon(0.01, 1.1, 1000, 1e-5)[0]), rel=1e-12)


def test_calibrate_steps_and_batch_size_agree_with_sweep(capsys):
    delta = 1 / 60000**2
    q, steps = 256 / 60000, math.ceil(15 * 60000 / 256)
    r = _json(capsys, ["calibrate", "--epsilon", "3", *RUN])
    assert r["noise_multiplier"] == pytest.approx(
        sweep.noise_multiplier(3.0, delta, q, steps).unwrap(), rel=1e-12
    )
    assert float(jaxrdp.epsilon(q, r["noise_multiplier"], steps, delta)[0]) <= 3.0

    r = _json(capsys, ["steps", "--epsilon", "3", *RUN[:4], "--noise-multiplier", "1.1"])
    assert r["steps"] == int(sweep.max_steps(3.0, delta, q, 1.1).unwrap())
    assert r["epochs"] == pytest.approx(r["steps"] * 256 / 60000)

    r = _json(capsys, ["batch-size", "--epsilon", "3", "--dataset-size", "60000", "--epochs", "15",
                       "--noise-multiplier", "1.1"])
    assert r["batch_size"] == int(sweep.batch_size(3.0, delta, 1.1, 15, 60000).unwrap())


def test_sweep_writes_csv_and_plot(tmp_path, capsys):
    out, png = tmp_path / "eps.csv", tmp_path / "eps.png"
    code = cli.main(["sweep", "--q", "1e-3:1e-1:3log", "--sigma", "0.8:2:3", "--steps", "100,1000",
                     "--delta", "1e-5", "--out", str(out), "--plot", str(png)])
    assert code == 0
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 3 * 3 * 2
    row = rows[-1]
    expected = jaxrdp.epsilon(float(row["q"]), float(row["noise_multiplier"]), int(row["steps"]), 1e-5)[0]
    assert float(row["epsilon"]) == pytest.approx(float(expected), rel=1e-9)
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_sweep_of_calibrated_sigma(capsys):
    r = _json(capsys, ["sweep", "--q", "1e-3,1e-2", "--steps", "1000", "--delta", "1e-5",
                       "--target-epsilon", "1,3"])
    assert r["kind"] == "noise_multiplier" and len(r["rows"]) == 4
    for row in r["rows"]:
        assert row["status"] == "OK"
        eps = float(jaxrdp.epsilon(row["q"], row["noise_multiplier"], row["steps"], 1e-5)[0])
        assert eps <= row["target_epsilon"]


def test_rdp_command(capsys):
    r = _json(capsys, ["rdp", "--q", "0.01", "--sigma", "1.1"])
    np.testing.assert_allclose(r["rdp"], np.asarray(jaxrdp.rdp(0.01, 1.1, jaxrdp.DEFAULT_ORDERS)), rtol=1e-14)


@pytest.mark.parametrize(
    "argv",
    [
        ["epsilon", "--q", "0.1", "--sigma", "-1", "--steps", "10", "--delta", "1e-5"],
        ["epsilon", "--q", "1.5", "--sigma", "1", "--steps", "10", "--delta", "1e-5"],
        ["epsilon", "--q", "0.1", "--sigma", "1", "--steps", "10", "--delta", "1.5"],
        ["epsilon", "--q", "0.1", "--sigma", "1", "--steps", "10"],  # no δ and no N
        ["epsilon", "--dataset-size", "100", "--batch-size", "200", "--epochs", "1", "--sigma", "1"],
        ["sweep", "--q", "1e-4:0.1:x", "--sigma", "1", "--steps", "10", "--delta", "1e-5"],
        ["sweep", "--q", "-1:0.1:3log", "--sigma", "1", "--steps", "10", "--delta", "1e-5"],
        ["calibrate", "--epsilon", "1", "--q", "0.01", "--steps", "0", "--delta", "1e-5"],
        ["epsilon", "--q", "abc", "--sigma", "1", "--steps", "10", "--delta", "1e-5"],
        ["nonsense"],
    ],
)
def test_bad_input_exits_2_with_one_line(argv, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "error" in err
    assert "Traceback" not in err


def test_unmeetable_target_exits_1(capsys):
    code = cli.main(["calibrate", "--epsilon", "1e-9", "--q", "0.5", "--steps", "100000", "--delta", "1e-9"])
    _, err = capsys.readouterr()
    assert code == 1 and "INFEASIBLE" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["epsilon", "calibrate", "steps", "batch-size", "sweep", "rdp"])
def test_help_shows_an_example(command, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    out, _ = capsys.readouterr()
    assert exc.value.code == 0
    assert f"example:\n  jaxrdp {command}" in out


@pytest.mark.slow
def test_console_script_runs():
    # with the run's compilation cache (the programs the tests compiled are loaded, not
    # compiled again: 37 s of this test before; the command line's own cache is tested below)
    env = conftest.shared_cache_environment()
    res = subprocess.run(
        [sys.executable, "-m", "jaxrdp", "epsilon", "--q", "0.01", "--sigma", "1.1", "--steps", "100",
         "--delta", "1e-5"],
        capture_output=True, text=True, env=env,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ε = ")
    # The program ends itself after flushing: the status and the message still arrive.
    res = subprocess.run(
        [sys.executable, "-m", "jaxrdp", "epsilon", "--q", "1.5", "--sigma", "1.1", "--steps", "100",
         "--delta", "1e-5"],
        capture_output=True, text=True, env=env,
    )
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("jaxrdp epsilon: error:") and "q" in res.stderr


def test_parse_range_forms():
    np.testing.assert_allclose(cli.parse_range("1:3:3"), [1, 2, 3])
    np.testing.assert_allclose(cli.parse_range("1e-2:1:3log"), [1e-2, 1e-1, 1])
    np.testing.assert_allclose(cli.parse_range("0.5,2"), [0.5, 2])
    with pytest.raises(cli.UsageError):
        cli.parse_range("1:2")


def _run_cli(env_updates, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION", "JAX_ENABLE_COMPILATION"))}
    env.pop(cli.NO_CACHE_VARIABLE, None)
    env.update({"XDG_CACHE_HOME": str(tmp_path / "cache"), **env_updates})
    argv = [sys.executable, "-m", "jaxrdp", "rdp", "--q", "0.01", "--sigma", "1.1", "--json"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_command_line_fills_a_persistent_compilation_cache(tmp_path):
    first = _run_cli({}, tmp_path)
    cache = tmp_path / "cache" / "jaxrdp" / "xla"
    assert cache.is_dir() and any(cache.iterdir())
    assert _run_cli({}, tmp_path) == first  # read back from the cache: same answer


def test_command_line_keeps_its_traced_programs(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION", "JAX_ENABLE_COMPILATION"))}
    env.pop(cli.NO_CACHE_VARIABLE, None)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    argv = [sys.executable, "-m", "jaxrdp", "epsilon", "--q", "0.01", "--sigma", "1.1",
            "--steps", "1000", "--delta", "1e-5", "--json"]
    runs = [subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    programs = tmp_path / "cache" / "jaxrdp" / "programs"
    assert len(list(programs.glob("*.pkl"))) == 2  # the RDP ε and the profile's ε program
    first, second = (json.loads(r.stdout) for r in runs)
    assert first == second  # the second from the stored programs
    assert first["epsilon"] == pytest.approx(float(jaxrdp.epsilon(0.01, 1.1, 1000, 1e-5)[0]),
                                             rel=1e-12)
    # the command compiles its programs without the backend's optimisations (last-bit
    # differences), and the verified profile ε moves in steps of 1e-12 relative (the
    # candidates above the root, profile._NUDGE): one step apart at most
    assert first["epsilon_profile"] == pytest.approx(
        float(jaxrdp.profile.epsilon(0.01, 1.1, 1000, 1e-5).epsilon), rel=2.5e-12)


def test_command_line_cache_respects_opt_out_and_jax_settings(tmp_path):
    _run_cli({cli.NO_CACHE_VARIABLE: "1"}, tmp_path)
    assert not (tmp_path / "cache" / "jaxrdp").exists()
    own = tmp_path / "own"
    _run_cli({"JAX_COMPILATION_CACHE_DIR": str(own)}, tmp_path)
    assert not (tmp_path / "cache" / "jaxrdp").exists()
    assert own.is_dir() and any(own.iterdir())
    _run_cli({"JAX_ENABLE_COMPILATION_CACHE": "false"}, tmp_path)
    assert not (tmp_path / "cache" / "jaxrdp").exists()
