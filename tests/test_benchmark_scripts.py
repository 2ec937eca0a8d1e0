"""benchmarks/vmc_scale.py and benchmarks/accelerator_suite.py end to end in quick mode (on the CPU),
and the FLOP count they share (benchmarks/_common.py, the harness; its own tests:
tests/test_benchmark_harness.py)."""
import importlib.util
import json
import math
import os
import pathlib
import shlex
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
PARTS = ("sampling", "local_energy", "jacobian", "solve")


def load(name):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses of a script look their module up there)
    spec.loader.exec_module(module)
    return module


def script(name, *args, timeout=240):
    """Run a benchmark script as a user would: one CPU device (not the suite's 8)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                                if not f.startswith("--xla_force_host_platform_device_count"))
    return subprocess.run([sys.executable, str(BENCH / f"{name}.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=BENCH.parent)



def in_process(capsys, name, *args):
    """A script's ``main(args)`` run in this process (no new interpreter and jax import):
    ``(exit code, stdout, stderr)``. For refusals, which happen before any work; one case
    of each script still runs as a user runs it (:func:`script`)."""
    capsys.readouterr()
    try:
        code = load(name).main(list(args))
        code = code if isinstance(code, int) else 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def positive(x):
    return x is not None and math.isfinite(x) and x > 0


# --------------------------------------------------------------------------- #
# FLOPs                                                                        #
# --------------------------------------------------------------------------- #


def test_jaxpr_cost_counts_loops_where_xla_counts_one_iteration():
    common = load("_common")
    x, w = jnp.ones((8, 32), jnp.float32), jnp.ones((32, 32), jnp.float32)
    one = 2 * 8 * 32 * 32

    def loop(x, w):
        return jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=10)[0]

    rec = {}
    compiled = common.compile_part(jax.jit(loop), (x, w), rec)
    assert np.allclose(compiled(x, w), loop(x, w))
    assert rec["matmul_flops"] == 10 * one
    assert rec["dots"] == {"1x8x32x32 float32": 10 * one}
    assert rec["xla_flops"] < 2 * one  # XLA: the loop body once
    assert rec["memory"]["total"] > 0 and rec["compile_s"] > 0

    def flat(x, w):  # no loop: both counts agree
        return jnp.tanh(x @ w) + 1.0

    rec = {}
    common.compile_part(jax.jit(flat), (x, w), rec)
    assert rec["flops"] == one + 8 * 32 and rec["transcendentals"] == 8 * 32
    assert rec["xla_flops"] == pytest.approx(rec["flops"], rel=0.05)

    def branches(i, x, w):  # a two-way cond: the cheaper branch; a switch: the dearest
        a = jax.lax.cond(i > 0, lambda: x @ w, lambda: x)
        return jax.lax.switch(i, [lambda: a, lambda: a @ w, lambda: a @ w @ w])

    cost = common.jaxpr_cost(jax.make_jaxpr(branches)(1, x, w))
    assert cost["matmul_flops"] == 2 * one
    assert cost["flops_bounds"] == [0, 3 * one]

    def dynamic(n, x, w):  # a run-time trip count: not counted, kept aside
        return jax.lax.fori_loop(0, n, lambda i, c: c @ w, x)

    cost = common.jaxpr_cost(jax.make_jaxpr(dynamic)(3, x, w))
    assert cost["flops"] == 0 and cost["dynamic_loops"] == 1 and cost["dynamic_loop_flops"] >= one


def test_quick_runs_never_write_the_results():
    vmc_scale, suite = load("vmc_scale"), load("accelerator_suite")
    assert vmc_scale.output_paths(True, None, None) == (None, None)
    assert vmc_scale.output_paths(True, "a.json", None) == ("a.json", None)
    assert vmc_scale.output_paths(False, None, None) == (vmc_scale.DEFAULT_JSON, vmc_scale.DEFAULT_PLOT)
    assert suite.output_path(True, None) is None and suite.output_path(False, None) == suite.DEFAULT_JSON
    assert suite.DEFAULT_JSON.endswith("accelerator_suite.json")
    assert [suite.platform_flag(b) for b in ("tpu", "cuda", "gpu", "cpu")] == ["tpu", "gpu", "gpu", "cpu"]
    assert vmc_scale.lattice_name("6") == "6x6" and vmc_scale.lattice_name("2x4") == "2x4"
    # every script with --quick and a --json default leaves the committed results alone without --json
    for path in sorted(BENCH.glob("*.py")):
        text = path.read_text()
        if "--quick" in text and "add_json_option(" in text and not path.name.startswith("_"):
            call = text.split("add_json_option(", 1)[1].split("\n", 1)[0]
            assert any(f'"{w}"' in call for w in ("full", "asked", "given")), \
                f"{path.name}: --quick would write the committed JSON"


# --------------------------------------------------------------------------- #
# the scripts                                                                  #
# --------------------------------------------------------------------------- #


@pytest.mark.slow  # the script's rows
def test_vmc_scale_reports_rows_over_budget_as_skipped(tmp_path):
    out, png = tmp_path / "scale.json", tmp_path / "scale.png"
    proc = script("vmc_scale", "--quick", "--budget-s", "0", "--json", str(out), "--plot", str(png))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [(r["lattice"], r["hamiltonian"], r["symmetry"]) for r in rows] == [
        ("2x4", "heisenberg", "translations"), ("4x4", "heisenberg", "translations")]
    for r in rows:
        assert r["status"] == "skipped" and "> budget 0 s" in r["reason"] and r["estimate_s"] > 0
    assert "its build took" in rows[0]["reason"]  # the first row: from its own build
    assert "from 2x4 heisenberg translations" in rows[1]["reason"] and "build_s" not in rows[1]  # never built
    assert rows[1]["n_sites"] == 16 and rows[1]["channels"] == 8
    assert proc.stdout.count("skipped: estimated") == 4  # progress lines and the table
    assert result["peak"]["peak_gflops"] > 0 and result["meta"]["jax"] == jax.__version__
    assert png.stat().st_size > 0
    # the harness's fields (benchmarks/_common.py: stamp): the command that wrote it, and its meta
    assert result["command"] == ("python benchmarks/vmc_scale.py --quick --budget-s 0 --json "
                                 f"{shlex.quote(str(out))} --plot {shlex.quote(str(png))}")
    assert len(result["meta"]["load_average"]) == 3 and len(result["meta"]["load_average_start"]) == 3


# slow: a benchmark's measured row end to end, as its skip logic (test_vmc_scale_reports_rows_over_budget_as_skipped)
@pytest.mark.slow
def test_vmc_scale_measures_a_row_of_the_network_as_built(tmp_path):
    """One measured row (not only skipped ones): its network's size is read from the
    network the recipe built (a refactor of the modules once broke it, on the chip only)."""
    out = tmp_path / "scale.json"
    proc = script("vmc_scale", "--quick", "--lattices", "2x4", "--json", str(out), "--plot", str(tmp_path / "s.png"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["status"] == "measured", row
    assert (row["channels"], row["depth"], row["kernel_size"]) == (8, 2, 3) and row["n_params"] > 0
    assert row["step"]["time_s"] > 0 and row["conv_form"]


def test_accelerator_suite_refuses_without_an_accelerator(tmp_path):
    proc = script("accelerator_suite", "--json", str(tmp_path / "suite.json"), timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "no TPU or GPU" in proc.stderr and "--quick" in proc.stderr
    assert not (tmp_path / "suite.json").exists()


@pytest.mark.slow
def test_accelerator_suite_quick_end_to_end(tmp_path):
    out = tmp_path / "suite.json"
    proc = script("accelerator_suite", "--quick", "--json", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["command"] == f"python benchmarks/accelerator_suite.py --quick --json {shlex.quote(str(out))}"
    assert result["environment"]["JAX_PLATFORMS"] == "cpu"
    assert result["started_utc"][:2] == "20"
    parts = result["parts"]
    assert set(parts) == {"train", "sharding", "memory", "tdvp", "peaks", "scale", "w1", "agreement"}
    for name, part in parts.items():
        assert "error" not in part and "skipped" not in part, (name, part)
    tdvp = parts["tdvp"]  # the TDVP step, from tdvp_peers.py's row of this library
    assert tdvp["steps"] >= 1 and positive(tdvp["step_ms"]) and positive(tdvp["warmup_s"]) and tdvp["max_dsx"] < 0.1

    # (a) the scale table, from vmc_scale's functions
    scale = parts["scale"]
    (row,) = scale["rows"]
    assert row["status"] == "measured" and (row["lattice"], row["n_sites"], row["n_samples"]) == ("2x4", 8, 16)
    for key in ("n_params", "conv_form", "local_energy_chunk", "build_s", "first_step_s", "channels", "depth"):
        assert key in row
    programs = [row["step"]] + [row["parts"][p] for p in PARTS]
    for rec in programs:
        assert positive(rec["flops"]) and positive(rec["xla_flops"]) and positive(rec["matmul_flops"])
        assert positive(rec["time_s"]) and positive(rec["gflops"]) and positive(rec["peak_fraction"])
        assert rec["compile_s"] > 0 and rec["memory"]["total"] > 0
        low, high = rec["flops_bounds"]
        assert 0 < low <= rec["flops"] <= high
    # the sampler's sweeps are a loop: XLA counts one proposal of each sweep
    assert row["parts"]["sampling"]["flops"] > row["parts"]["sampling"]["xla_flops"]
    peak = scale["peak"]
    assert positive(peak["peak_gflops"]) and peak["peak_label"] and len(peak["rows"]) >= 2
    meta = scale["meta"]
    assert meta["backend"] == "cpu" and len(meta["load_average_start"]) == 3 and len(meta["load_average_end"]) == 3
    assert pathlib.Path(scale["plot"]).stat().st_size > 0

    # (b) GSPMD vs shard_map on 2 (simulated) devices
    sharding = parts["sharding"]
    assert sharding["returncode"] == 0 and pathlib.Path(sharding["plot"]).stat().st_size > 0
    cases = {(r["devices"], r["shard_batch"]): r for r in sharding["result"]["rows"]}
    assert cases[(2, False)]["collectives"]["all-gather"]["count"] > 0
    assert cases[(2, True)]["collectives"]["all-gather"]["count"] == 0

    # (c) W1, from vmc_step's measure
    (w1,) = parts["w1"]["rows"]
    assert w1["status"] == "measured" and w1["group"] == "translations" and w1["n_samples"] == 16
    assert all(positive(w1[f"{k}_s"]) for k in ("step",) + PARTS)

    # (d) memory per chunk: compiled sizes; no measured peak on CPUs
    cases = parts["memory"]["cases"]
    assert {(c["program"], c["chunk"]) for c in cases} == {
        (p, c) for p in ("local_energy", "jacobian") for c in ("4", "default")}
    assert cases[0]["chunk"] == "default"  # compiled first: the budget leaves out one of the others
    for c in cases:
        assert c["memory"]["total"] > 0 and c["memory"]["temp"] >= 0 and positive(c["time_s"])
        assert c["peak_bytes_in_use"] is None
    assert "memory per chunk" in proc.stdout and "GF/s" in proc.stdout

    # (e) the README's main job (quick: chain:8, 10 steps), its first step and relative error
    train = parts["train"]
    assert train["returncode"] == 0 and train["iterations"] == 10 and train["lattice"] == "chain:8"
    assert 0 < train["first_step_s"] <= train["training_s"] and train["relative_error"] < 0.5

    # (f) peaks: three precisions; (g) agreement with the float64 CPU library, here CPU against
    # CPU (the same float64 programs on both sides), so every difference is rounding
    assert all(positive(parts["peaks"][k]["tflops"]) for k in ("bfloat16", "float32_default", "float32_highest"))
    agree = parts["agreement"]
    # (float32 networks evaluated in other batches: log psi to float32 rounding; measured 2.4e-7)
    assert agree["backend"] == "cpu" and agree["e_loc_rel_diff"] < 1e-5 and agree["log_psi_max_abs_diff"] < 1e-5
    for method in ("sr", "minsr"):
        assert agree[f"{method}_direction_rel_diff_same_jacobian"] < 1e-9  # the same float64 solve
        assert agree[f"{method}_direction_rel_diff_whole_step"] < 1e-4
    assert agree["correlations_max_abs_diff"] < 1e-5

# --------------------------------------------------------------------------- #
# accuracy.py: its rows are valid runs, its convergence curves and plot         #
# --------------------------------------------------------------------------- #


def test_accuracy_rows_are_valid_recipes_and_convergence_is_relative_error(tmp_path):
    from quantax_lite import Recipe
    from quantax_lite.cli import command as cli

    accuracy = load("accuracy")
    for name, spec in accuracy.SYSTEMS.items():
        ns = cli.build_parser().parse_args(["train", *spec["args"]])
        recipe = Recipe(**{field: getattr(ns, field) for field in cli.RECIPE})  # raises on a bad row
        assert spec.get("minutes", accuracy.DEFAULT_MINUTES) > 0, name
        # a relative error, or (no exact energy: 10x10) an energy per site, never neither
        assert (spec["target"] or 0) > 0 or spec["target_energy_per_site"] < 0, name
        if name == "heisenberg_kagome2x3":  # the 18-site ground state's sector (docs/physics.md)
            assert recipe.momentum in ((1, 0), [1, 0]) and recipe.spin_parity == -1
    exact = -8.0
    records = [dict(wall_time_s=float(i), energy=e) for i, e in enumerate([-7.0, float("nan"), -7.9, -8.04])]
    t, rel = accuracy.convergence(records, exact)
    np.testing.assert_allclose(t, [0.0, 2.0, 3.0])
    np.testing.assert_allclose(rel, [1 / 8, 0.1 / 8, 0.04 / 8])
    row = dict(system="x", target=1e-3, minutes_budget=15, relative_error=5e-3, relative_error_bar=1e-4,
               wall_time_s=4.0)
    png = tmp_path / "acc.png"
    accuracy.plot_convergence([(row, t, rel)], png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the curve kept in the JSON row: at most n points, the first and last among them
    t_long, rel_long = np.arange(1001.0), 1.0 / (1.0 + np.arange(1001.0))
    c = accuracy.thinned(t_long, rel_long, n=50)
    assert len(c["wall_time_s"]) == 50 and c["wall_time_s"][0] == 0.0 and c["wall_time_s"][-1] == 1000.0
    np.testing.assert_allclose(c["relative_error"], 1.0 / (1.0 + np.asarray(c["wall_time_s"])), rtol=1e-3)
    assert accuracy.thinned(t, rel)["relative_error"] == [0.125, 0.0125, 0.005]
    # every row of the JSON is plotted, one without a stored curve by its final point only
    rows = [dict(row, convergence=c), {k: v for k, v in row.items() if k != "minutes_budget"} | {"system": "y"}]
    curves = accuracy.curves_of(rows)
    assert [len(x[1]) for x in curves] == [50, 0]
    json_path = tmp_path / "acc.json"
    json_path.write_text(json.dumps(rows))
    accuracy.main(["--replot", "--json", str(json_path), "--plot", str(tmp_path / "all.png")])
    assert (tmp_path / "all.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_accuracy_trains_an_accelerator_row_across_windows(tmp_path, monkeypatch, capsys):
    """A row trained in windows (--window, one command each): each call resumes the run,
    trains within what is left of the row's budget, records its window; once the budget is
    spent the row is read back without training. Its wall time counts every window and its
    convergence curve's clock runs on across them."""
    accuracy = load("accuracy")
    row = dict(target=1e-2, minutes=2, accelerator=True,  # windows of 0.004 min of training
               args=["--lattice", "chain:8", "--channels", "2", "--depth", "1", "--samples", "16",
                     "--iters", "50", "--eval-samples", "64", "--checkpoint-every", "0"])
    monkeypatch.setattr(accuracy, "SYSTEMS", {"tiny_chip": row})
    archive = tmp_path / "runs.tgz"  # what comes back from the chip; each window starts on a bare machine
    argv = ["--only", "tiny_chip", "--allow-cpu", "--window", "0.004", "--archive", str(archive),
            "--json", str(tmp_path / "acc.json")]
    iterations = []
    for k in range(2):  # each window stops at its limit (a step compiles for longer), then the next resumes
        out = tmp_path / f"machine{k}" / "tiny_chip"
        accuracy.main(argv + ["--out", str(out.parent)])
        if k == 0:
            (after_first,) = json.loads((tmp_path / "acc.json").read_text())
        windows = accuracy.read_windows(out)
        assert windows[-1]["stopped_at_time_limit"] and windows[-1]["time_limit_min"] == 0.004
        iterations.append(windows[-1]["iterations"])
    assert len(windows) == 2 and 0 < iterations[0] < iterations[1] < 50
    assert accuracy.time_limit_of(0.01, windows, 0.004) is None  # 0.008 of 0.008 minutes trained
    out = tmp_path / "machine2" / "tiny_chip"
    monkeypatch.setattr(accuracy, "SYSTEMS", {"tiny_chip": dict(row, minutes=0.01)})  # 0.008 min of training
    accuracy.main(argv + ["--out", str(out.parent)])  # nothing left: the row is read back, no third window
    assert "budget is spent" in capsys.readouterr().out
    assert len(accuracy.read_windows(out)) == 2
    import tarfile

    with tarfile.open(archive) as tar:  # the run folder, without its lock
        names = tar.getnames()
    assert "tiny_chip/log.jsonl" in names and "tiny_chip/summary.json" in names
    assert not any(n.endswith(".lock") for n in names)
    (saved,) = json.loads((tmp_path / "acc.json").read_text())
    assert saved["windows"] == 2 and saved["iterations"] == iterations[1]
    # each window keeps its own final estimate; the last one is the row's
    assert [w["iterations"] for w in saved["window_estimates"]] == iterations
    assert saved["window_estimates"][-1]["energy"] == saved["energy"]
    assert saved["window_estimates"][0] == after_first["window_estimates"][0]
    assert saved["window_estimates"][0]["energy"] == after_first["energy"] != saved["energy"]
    assert {w["estimate_symmetry"] for w in windows} == {saved["estimate_symmetry"]}
    assert saved["wall_time_s"] == pytest.approx(sum(w["wall_s"] for w in windows), abs=0.02)
    assert np.all(np.diff(saved["convergence"]["wall_time_s"]) >= 0)  # one clock over both windows
    # the limits of a row's calls: the window, then what is left, none once its steps are done
    assert accuracy.time_limit_of(20, [], 9) == 9
    spent = [dict(training_min=9.0, wall_s=600.0, stopped_at_time_limit=True)]
    assert accuracy.time_limit_of(20, spent, 9) == pytest.approx(7.0)
    assert accuracy.time_limit_of(20, spent + [dict(training_min=3.0, wall_s=300.0, stopped_at_time_limit=False)],
                                  9) is None
    # the budget is wall time: a window's start, compilation and estimate count too, and the
    # next window is left room for as much as the slowest earlier one took besides training
    first = [dict(training_min=7.0, wall_s=528.78, stopped_at_time_limit=True)]  # 1.81 min besides training
    assert accuracy.time_limit_of(20, first, 10) == pytest.approx(9.0)  # 16 - 7: the training share binds
    slow = [dict(training_min=7.0, wall_s=720.0, stopped_at_time_limit=True)]  # 5 min besides training
    assert accuracy.time_limit_of(20, slow, 10) == pytest.approx(20 - 12 - 5)
    # room for the most any earlier window took besides training, not only the last one's
    slow_first = slow + [dict(training_min=1.0, wall_s=90.0, stopped_at_time_limit=True)]  # 5, then 0.5 besides
    assert accuracy.time_limit_of(30, slow_first) == pytest.approx(30 - 13.5 - 5)  # not 30 - 13.5 - 0.5
    # a warm start's minutes count in the wall time too (the training share would leave 12)
    assert accuracy.time_limit_of(30, slow, warm_start_min=5.0) == pytest.approx(30 - 5 - 12 - 5)
    second = first + [dict(training_min=7.0, wall_s=660.0, stopped_at_time_limit=True)]  # 14 of 16 trained
    assert accuracy.time_limit_of(20, second, 7) is None  # 19.8 minutes spent: no room for a third window
    assert accuracy.time_limit_of(40, second) == pytest.approx(40 - (528.78 + 660.0) / 60 - 4.0)
    # a row without an exact energy is judged by its energy per site
    judged = dict(target=None, target_energy_per_site=-0.4965, energy=-49.70, energy_per_site=-0.4970,
                  exact_energy=None, minutes_budget=25, wall_time_s=60.0)
    assert accuracy.row_status(judged) == "met"
    assert accuracy.row_status(dict(judged, energy_per_site=-0.4960)) == "not met"


@pytest.mark.slow  # a window's training; the windows: test_accuracy_trains_an_accelerator_row_across_windows
def test_accuracy_keeps_a_window_whose_lanczos_step_fails(tmp_path, monkeypatch, capsys):
    """A Lanczos step that cannot run (its samples do not fit the run's chains) after a
    window: the window's training is still recorded and archived (the next window resumes
    it), and the call exits with an error naming the row."""
    accuracy = load("accuracy")
    row = dict(target=1e-2, minutes=2, accelerator=True, lanczos_samples=24,  # 24: not a multiple of 16 chains
               args=["--lattice", "chain:8", "--channels", "2", "--depth", "1", "--samples", "16",
                     "--iters", "3", "--eval-samples", "64", "--checkpoint-every", "0"])
    monkeypatch.setattr(accuracy, "SYSTEMS", {"tiny_chip": row})
    archive = tmp_path / "runs.tgz"
    with pytest.raises(SystemExit, match="Lanczos step failed for tiny_chip"):
        accuracy.main(["--only", "tiny_chip", "--allow-cpu", "--window", "5", "--archive", str(archive),
                       "--json", str(tmp_path / "acc.json"), "--out", str(tmp_path / "runs")])
    assert "recorded without a Lanczos step" in capsys.readouterr().out
    (window,) = accuracy.read_windows(tmp_path / "runs" / "tiny_chip")
    assert window["iterations"] == 3 and "lanczos" not in window
    import tarfile

    with tarfile.open(archive) as tar:
        assert "tiny_chip/log.jsonl" in tar.getnames()
    (saved,) = json.loads((tmp_path / "acc.json").read_text())
    assert saved["iterations"] == 3 and "lanczos" not in saved


# slow: five short trainings; the windows and their budget: test_accuracy_trains_an_accelerator_row_across_windows
@pytest.mark.slow
def test_accuracy_counts_a_warm_start_against_the_row_budget(tmp_path, monkeypatch, capsys):
    """A row started from another row's run (warm_start): the source's wall time, read when
    the row starts and kept in the row's folder, shortens the row's training limit and
    counts in its minutes and status; later windows of the source do not change it; a start
    that used up the budget trains nothing; the row keeps the host its windows ran on."""
    accuracy = load("accuracy")
    small = ["--channels", "2", "--depth", "1", "--samples", "16", "--iters", "50", "--eval-samples", "64",
             "--checkpoint-every", "0"]
    source = dict(target=1e-2, minutes=2, accelerator=True, args=["--lattice", "chain:8", *small])
    warm = dict(target=None, target_energy_per_site=-0.3, minutes=1.0, accelerator=True, warm_start="tiny_src",
                args=["--lattice", "chain:12", *small])
    late = dict(warm, minutes=0.01)  # 0.008 minutes of training: less than its start took
    monkeypatch.setattr(accuracy, "SYSTEMS", {"tiny_src": source, "tiny_warm": warm, "tiny_late": late})
    argv = ["--allow-cpu", "--out", str(tmp_path), "--json", str(tmp_path / "acc.json")]
    accuracy.main(["--only", "tiny_src", "--window", "0.004", *argv])
    (src_window,) = accuracy.read_windows(tmp_path / "tiny_src")
    assert accuracy.warm_start_seconds(tmp_path / "tiny_src") == pytest.approx(src_window["wall_s"])
    assert accuracy.warm_start_seconds(tmp_path / "nowhere") is None
    accuracy.main(["--only", "tiny_warm", "--window", "5", *argv])  # its 50 steps end before its limit
    (first,) = accuracy.read_windows(tmp_path / "tiny_warm")
    assert first["time_limit_min"] == pytest.approx(0.8 * 1.0 - src_window["wall_s"] / 60)
    assert accuracy.read_warm_start(tmp_path / "tiny_warm") == pytest.approx(src_window["wall_s"])
    accuracy.main(["--only", "tiny_src", "--window", "0.004", *argv])  # the source trains on
    assert len(accuracy.read_windows(tmp_path / "tiny_src")) == 2
    windows_file = tmp_path / "tiny_warm" / accuracy.WINDOWS
    windows_file.write_text(json.dumps([dict(first, host="the chip")]))
    accuracy.main(["--only", "tiny_warm", "--window", "5", *argv])  # its steps are done: read back
    rows = {r["system"]: r for r in json.loads((tmp_path / "acc.json").read_text())}
    row = rows["tiny_warm"]
    assert row["host"] == "the chip"  # the window's host, not this machine's
    assert row["warm_start_wall_s"] == pytest.approx(src_window["wall_s"])  # the start, not the source's later windows
    assert row["wall_time_with_warm_start_s"] == pytest.approx(row["wall_time_s"] + src_window["wall_s"], abs=0.02)
    assert row["init_from"]["lattice"] == "chain:8" and row["init_from"]["iteration"] == src_window["iterations"]
    assert accuracy.minutes_of(row) == pytest.approx((row["wall_time_s"] + src_window["wall_s"]) / 60)
    out = capsys.readouterr().out
    assert "warm start: step" in out and "budget is spent or its steps are done" in out
    accuracy.main(["--only", "tiny_late", "--window", "5", *argv])
    assert "nothing left to train; no row" in capsys.readouterr().out
    assert not accuracy.list_checkpoints(str(tmp_path / "tiny_late"))
    assert "tiny_late" not in {r["system"] for r in json.loads((tmp_path / "acc.json").read_text())}
    # the limit: the training share of the budget less the warm start and the windows trained
    assert accuracy.time_limit_of(1.0, [], 9, warm_start_min=0.5) == pytest.approx(0.3)
    assert accuracy.time_limit_of(1.0, [dict(training_min=0.2, wall_s=12.0, stopped_at_time_limit=True)], 9,
                                  0.7) is None
    # the status: met only when the row's own time and its start's fit the budget, and known
    judged = dict(target=None, target_energy_per_site=-0.4965, energy=-49.70, energy_per_site=-0.4970,
                  exact_energy=None, minutes_budget=25, wall_time_s=20 * 60.0, init_from=dict(iteration=10))
    assert accuracy.row_status(dict(judged, warm_start_wall_s=4 * 60.0)) == "met"
    assert accuracy.row_status(dict(judged, warm_start_wall_s=6 * 60.0)) == "not met"
    assert accuracy.row_status(dict(judged, warm_start_wall_s=None)) == "not met"


def test_accuracy_sets_a_row_without_exact_energy_against_the_lowest_published(saved_figures, tmp_path):
    """10x10 has no exact energy: its final energy, its training curve and the other
    published energies are drawn against the lowest published one, which its label names."""
    accuracy = load("accuracy")
    best, other = -0.4976921, -0.497634
    row = dict(system="j1j2_10x10_chip", target=None, target_energy_per_site=-0.4965, minutes_budget=25,
               energy=-49.6275, energy_error=0.0036, energy_per_site=-0.496275, exact_energy=None,
               relative_error=None, relative_error_bar=None, v_score=7e-3, n_params=28032, iterations=1192,
               wall_time_s=945.0, warm_start_wall_s=440.0, init_from=dict(iteration=2950, lattice="6x6"),
               options="--lattice 10x10 --hamiltonian j1j2 --J2 0.5", status="not met",
               published=[dict(source="ResNet (A)", energy_per_site=best),
                          dict(source="ViT (B)", energy_per_site=other)])
    assert accuracy.reference_energy(row) == (pytest.approx(best * 100), "ResNet (A)")
    assert accuracy.signed_error(row) == pytest.approx((-49.6275 - best * 100) / abs(best * 100))
    ((source, rel, doubt),) = accuracy.published_points(row)  # the reference itself is the zero line
    assert source == "ViT (B)" and rel == pytest.approx((other - best) / abs(best)) and 0 < doubt < 1e-5
    assert accuracy.reference_energy(dict(row, published=[])) is None
    assert accuracy.reference_energy(dict(row, exact_energy=-50.0)) == (-50.0, None)
    t, rel = accuracy.convergence([dict(wall_time_s=1.0, energy=-49.0), dict(wall_time_s=2.0, energy=-49.5)],
                                  accuracy.reference_energy(row)[0])
    np.testing.assert_allclose(rel, [abs(e - best * 100) / abs(best * 100) for e in (-49.0, -49.5)])
    accuracy.plot_convergence([(row, t, rel)], tmp_path / "acc.png")
    ((_, fig),) = saved_figures
    ax = fig.get_axes()[0]
    (label,) = [t.get_text() for t in ax.get_yticklabels()]
    assert "23.1 min incl. warm start" in label and "against the lowest published energy (ResNet)" in label
    drawn = [float(np.asarray(c.lines[0].get_xdata(), float)[0]) for c in ax.containers]
    assert any(abs(d - accuracy.signed_error(row)) < 1e-12 for d in drawn)
    assert any(abs(d - (other - best) / abs(best)) < 1e-12 for d in drawn)
    assert "E_ref" in ax.get_xlabel()
    # a run folder of such a row: row_of keeps its training curve against the same reference
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(dict(
        exact_energy=None, n_sites=100, relative_error=None, energy=-49.6, energy_error=0.004, v_score=7e-3,
        n_params=28032, iterations=2)))
    (out / "log.jsonl").write_text("".join(json.dumps(dict(iteration=i + 1, wall_time_s=float(i + 1), energy=e)) + "\n"
                                           for i, e in enumerate((-49.0, -49.5))))
    spec = dict(target=None, target_energy_per_site=-0.4965, published=[("ResNet (A)", best), ("ViT (B)", other)])
    made = accuracy.row_of("j1j2_10x10_chip", spec, str(out), [], [], wall=60.0)
    np.testing.assert_allclose(made["convergence"]["relative_error"], rel, rtol=1e-3)
    assert accuracy.signed_error(made) == pytest.approx((-49.6 - best * 100) / abs(best * 100))


def test_accuracy_refuses_accelerator_rows_on_a_cpu(capsys):
    accuracy = load("accuracy")
    with pytest.raises(SystemExit) as err:
        accuracy.main(["--only", "j1j2_6x6_chip", "--json", "/dev/null"])
    assert err.value.code == 2 and "--allow-cpu" in capsys.readouterr().err


# --------------------------------------------------------------------------- #
# model_forward.py: its variants are compared on the same samples               #
# --------------------------------------------------------------------------- #


@pytest.mark.slow  # a benchmark's quick run in a fresh process
def test_model_forward_quick_compares_variants_on_the_same_samples(tmp_path):
    """The full (576 images) and merged (16 images) networks, with and without shard_batch,
    evaluated on the same samples with the same parameters: log psi agrees to rounding."""
    out = tmp_path / "forward.json"
    proc = script("model_forward", "--quick", "--grad-samples", "0", "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.read_text())
    rows = record["rows"]
    assert record["command"].startswith("python benchmarks/model_forward.py --quick") and record["meta"]["jax"]
    assert {(r["variant"], r["shard_batch"]) for r in rows} == {
        (v, sb) for v in ("full", "merged") for sb in (False, True)}
    compared = 0
    for batch in sorted({r["batch"] for r in rows}):
        first, *rest = [r for r in rows if r["batch"] == batch and r.get("time_s") is not None]
        assert "max_abs_diff_vs_first" not in first
        for r in rest:
            assert r["max_abs_diff_vs_first"] < 1e-10, r  # float64 rounding (measured 4e-15)
            assert r["max_phase_diff_vs_first"] < 1e-10, r
            compared += r["variant"] == "merged"
    assert compared >= 2  # the merged network, against the full one, at every batch size


# --------------------------------------------------------------------------- #
# accuracy.py: energies below the exact one, and where it writes                #
# --------------------------------------------------------------------------- #


def test_accuracy_flags_an_energy_below_exact_as_an_estimator_bug():
    """Synthetic rows: below the exact energy by more than 3 error bars plus rounding is a
    bug, never met (abs() of the relative error would call it a success); within them, or
    above, the target and the time budget decide."""
    accuracy = load("accuracy")
    exact, err = -8.0, 1e-3

    def row(energy, energy_error=err, target=1e-3, wall=60.0):
        return dict(energy=energy, energy_error=energy_error, exact_energy=exact, target=target,
                    relative_error=abs((energy - exact) / exact), minutes_budget=15, wall_time_s=wall)

    bug = "below exact: estimator bug"
    assert accuracy.BELOW_EXACT == bug
    assert accuracy.row_status(row(exact - 4 * err)) == bug  # rel. error 5e-4 < target: abs() would say met
    assert accuracy.row_status(row(exact - 2.9 * err)) == "met"  # within 3 error bars
    assert accuracy.row_status(row(exact + 4 * err)) == "met"
    assert accuracy.row_status(row(exact + 0.01)) == "not met"  # 1.25e-3 > target
    assert accuracy.row_status(row(exact + err, wall=16 * 60.0)) == "not met"  # over the budget
    # exact sums: no error bar, only rounding (1e-7 relative) below
    assert accuracy.row_status(row(exact - 1e-7, energy_error=0.0)) == "met"
    assert accuracy.row_status(row(exact - 1e-5, energy_error=0.0)) == bug
    assert accuracy.row_status(row(exact - 1e-5, energy_error=None)) == bug


def _fake_train(energy_of):
    """A stand-in for ``quantax_lite.cli.command.main``: writes the run folder accuracy.py reads."""
    def train(argv):
        out = pathlib.Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        exact = -11.228483208428857
        energy, error = energy_of(exact)
        summary = dict(n_sites=16, energy=energy, energy_error=error, exact_energy=exact,
                       relative_error=abs((energy - exact) / exact), v_score=1e-4, n_params=100, iterations=3)
        (out / "summary.json").write_text(json.dumps(summary))
        (out / "log.jsonl").write_text("".join(json.dumps(dict(iteration=k, wall_time_s=float(k), energy=exact + 1 / k))
                                               + "\n" for k in (1, 2, 3)))
        return 0
    return train


def _plots_recorded(monkeypatch, accuracy, tmp_path):
    """accuracy.plot_convergence records the paths it is given and draws only under tmp_path
    (a broken accuracy.py must not overwrite the committed plot while this test runs)."""
    drawn, real = [], accuracy.plot_convergence

    def plot(curves, path):
        drawn.append(str(path))
        if str(path).startswith(str(tmp_path)):
            real(curves, path)
    monkeypatch.setattr(accuracy, "plot_convergence", plot)
    return drawn


def test_accuracy_reports_a_row_below_exact_in_json_and_table(tmp_path, monkeypatch, capsys):
    import quantax_lite.cli.command

    accuracy = load("accuracy")
    monkeypatch.setattr(accuracy, "DEFAULT_JSON", str(tmp_path / "results" / "accuracy.json"))
    monkeypatch.setattr(quantax_lite.cli.command, "main", _fake_train(lambda exact: (exact - 5e-3, 1e-4)))
    drawn = _plots_recorded(monkeypatch, accuracy, tmp_path)
    out = tmp_path / "elsewhere" / "one.json"
    accuracy.main(["--only", "heisenberg_4x4", "--out", str(tmp_path / "runs"), "--json", str(out)])
    (row,) = json.loads(out.read_text())
    assert row["status"] == "below exact: estimator bug" and row["met"] is False
    assert row["relative_error"] < 1e-3  # |E - E0| / |E0| alone is within the target
    printed = capsys.readouterr().out
    line = next(ln for ln in printed.splitlines() if ln.startswith("heisenberg_4x4 "))
    assert line.endswith("below exact: estimator bug")
    # the plot beside the JSON given, never the committed one
    assert drawn == [str(tmp_path / "elsewhere" / "one.png")]
    assert (tmp_path / "elsewhere" / "one.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "results").exists()


def test_accuracy_writes_the_committed_results_only_when_asked(tmp_path, monkeypatch):
    import quantax_lite.cli.command

    accuracy = load("accuracy")
    committed = str(pathlib.Path(accuracy.__file__).parent / "results" / "accuracy")
    assert accuracy.DEFAULT_JSON == committed + ".json"
    assert accuracy.output_paths(False, None, None) == (committed + ".json", committed + ".png")
    assert accuracy.output_paths(False, "x/a.json", None) == ("x/a.json", "x/a.png")
    assert accuracy.output_paths(True, None, None) == (None, None)
    assert accuracy.output_paths(True, "x/a.json", "y.png") == ("x/a.json", "y.png")

    monkeypatch.setattr(accuracy, "DEFAULT_JSON", str(tmp_path / "results" / "accuracy.json"))
    monkeypatch.setattr(quantax_lite.cli.command, "main", _fake_train(lambda exact: (exact + 1e-5, 1e-5)))
    drawn = _plots_recorded(monkeypatch, accuracy, tmp_path)
    run = ["--only", "heisenberg_4x4", "--out", str(tmp_path / "runs")]
    accuracy.main(run + ["--quick"])  # a quick run writes nothing
    assert drawn == [] and not (tmp_path / "results").exists()
    accuracy.main(run + ["--json", str(tmp_path / "a.json"), "--plot", str(tmp_path / "b.png")])
    assert drawn == [str(tmp_path / "b.png")] and not (tmp_path / "results").exists()
    assert json.loads((tmp_path / "a.json").read_text())[0]["status"] == "met"
    accuracy.main(run)  # a full run without --json: the (here stand-in) results, JSON and plot
    assert drawn[-1] == str(tmp_path / "results" / "accuracy.png")
    assert json.loads((tmp_path / "results" / "accuracy.json").read_text())[0]["met"] is True


# --------------------------------------------------------------------------- #
# accuracy.py: the figure a referee reads                                      #
# --------------------------------------------------------------------------- #


def test_accuracy_figure_names_systems_draws_published_and_whole_error_bars(saved_figures, tmp_path, monkeypatch):
    """Rows of several systems in one panel (not one panel each): systems named in words,
    the signed relative error with its whole error bar inside the axis, a row below the exact
    energy left of zero and named a bug, published energies at their relative error (an
    'exact ...' source is the reference, not a point), no target drawn, the host named."""
    accuracy = load("accuracy")
    saved = saved_figures
    exact = -8.457923351394843
    base = dict(minutes_budget=15, wall_time_s=600.0, n_params=2432, iterations=1000, exact_energy=exact,
                v_score=1e-3, cpu_count=2, machine="x86_64")
    rows = [
        dict(base, system="j1j2_4x4", target=1e-3, energy=exact * (1 - 9e-4), energy_error=8e-4,
             options="--lattice 4x4 --hamiltonian j1j2 --J2 0.5 --iters 2600",
             published=[dict(source="Quantax 0.4.0 tutorial, 4x4 J1-J2 (x)", energy_per_site=-0.5278482148)]),
        dict(base, system="heisenberg_6x6", target=1e-4, energy=-24.4381, energy_error=6.6e-4, exact_energy=-24.439392,
             options="--lattice 6x6 --hamiltonian heisenberg", published=[dict(source="exact (ED)",
                                                                               energy_per_site=-0.678872)]),
        dict(base, system="heisenberg_kagome2x3", target=1e-3, energy=exact * (1 - 5e-9), energy_error=0.0,
             options="--lattice kagome:2x3 --hamiltonian heisenberg --sampling exact_sum --symmetry full",
             published=[]),
        dict(base, system="chain_row_below_exact", target=1e-3, energy=exact * (1 + 5e-4), energy_error=1e-4,
             options="--lattice chain:20 --hamiltonian heisenberg", published=[]),
    ]
    for r in rows:
        r["energy_per_site"] = r["energy"] / (36 if "6x6" in r["options"] else 18 if "kagome" in r["options"]
                                              else 20 if "chain" in r["options"] else 16)
        r["relative_error"] = abs((r["energy"] - r["exact_energy"]) / r["exact_energy"])
        r["relative_error_bar"] = r["energy_error"] / abs(r["exact_energy"])
        r["status"] = accuracy.row_status(r)
    assert rows[3]["status"] == accuracy.BELOW_EXACT
    accuracy.plot_convergence(accuracy.curves_of(rows), tmp_path / "acc.png")
    ((_, fig),) = saved
    (ax,) = fig.get_axes()  # no curves kept: the one panel of final energies
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0].startswith("J1-J2 (J2 = 0.5), 4×4 square lattice, 16 sites\nsampled, translations")
    assert labels[2].startswith("Heisenberg, kagome lattice, 2×3 cells, 18 sites\nexact sum, full group")
    assert not any(r["system"] in lab for r in rows for lab in labels)
    lo, hi = ax.get_xlim()
    drawn = []
    for c in ax.containers:
        x = np.asarray(c.lines[0].get_xdata(), float)
        segs = [np.asarray(s)[:, 0] for s in c.lines[2][0].get_segments()] if c.lines[2] else []
        assert all(lo <= v <= hi for s in segs for v in s) and np.all((lo <= x) & (x <= hi))
        drawn.append(float(x[0]))
    signed = [(r["energy"] - exact) / abs(exact) for r in (rows[0], rows[2], rows[3])]
    for v in signed:
        assert any(abs(d - v) <= 1e-12 + 1e-9 * abs(v) for d in drawn), (v, drawn)
    published = (-0.5278482148 * 16 - exact) / abs(exact)  # 1.46e-3 above exact
    assert any(abs(d - published) < 1e-9 for d in drawn)
    assert sum(abs(d) < 1e-3 and abs(d - (-24.4381 + 24.439392) / 24.439392) < 1e-12 for d in drawn) == 1  # no ED point
    assert signed[2] < 0 and any(t.get_text() == "below exact: estimator bug" for t in ax.texts)
    assert not any(np.allclose(ln.get_xdata(), r["target"]) for ln in ax.get_lines() for r in rows)
    assert any("2-core x86_64 CPU" in t.get_text() for t in fig.texts)
    assert ax.get_xscale() == "symlog"


def test_accuracy_figure_of_the_committed_rows_is_two_panels(saved_figures, tmp_path, monkeypatch):
    """The committed JSON redrawn elsewhere (the committed plot untouched): one panel of all
    rows and one of the kept training curves, every row named in words; rows record no host
    yet and the footer says so."""
    accuracy = load("accuracy")
    saved = saved_figures
    committed = BENCH / "results" / "accuracy.png"
    before = committed.read_bytes()
    rows = json.loads((BENCH / "results" / "accuracy.json").read_text())
    accuracy.main(["--replot", "--json", str(BENCH / "results" / "accuracy.json"), "--plot", str(tmp_path / "a.png")])
    assert committed.read_bytes() == before
    ((_, fig),) = saved
    ax, cx = fig.get_axes()
    assert len(ax.get_yticklabels()) == len(rows)
    assert len(cx.get_lines()) == sum(bool(r.get("convergence")) for r in rows) and cx.get_yscale() == "log"
    assert all(accuracy.system_name(r) in t.get_text() for r, t in zip(rows, ax.get_yticklabels()))
    assert any("host not recorded" in t.get_text() for t in fig.texts)


def test_accuracy_names_a_stage_the_run_did_not_reach():
    """A staged row names its stages, unless its final estimate was made in an earlier one
    (a run stopped by its budget before the switch): then it says which stage was not reached."""
    accuracy = load("accuracy")
    staged = dict(system="x", options="--lattice 6x6 --symmetry translations>full@1800")
    assert accuracy.method_of(dict(staged, estimate_symmetry="full")) == "sampled, translations → full"
    assert accuracy.method_of(staged) == "sampled, translations → full"  # rows from before it was recorded
    assert accuracy.method_of(dict(staged, estimate_symmetry="translations")) == \
        "sampled, translations (full not reached)"
    assert accuracy.method_of(dict(system="x", options="--symmetry full", estimate_symmetry="full")) == \
        "sampled, full group"


def test_accuracy_rows_record_their_host(tmp_path, monkeypatch):
    import quantax_lite.cli.command

    accuracy = load("accuracy")
    monkeypatch.setattr(quantax_lite.cli.command, "main", _fake_train(lambda exact: (exact + 1e-5, 1e-5)))
    monkeypatch.setattr(accuracy, "plot_convergence", lambda curves, path: None)
    out = tmp_path / "a.json"
    accuracy.main(["--only", "heisenberg_4x4", "--out", str(tmp_path / "runs"), "--json", str(out)])
    (row,) = json.loads(out.read_text())
    assert row["cpu_count"] == os.cpu_count() and row["host"].startswith(f"{os.cpu_count()}-core")
    assert accuracy.host_label(row) == row["host"]


# --------------------------------------------------------------------------- #
# peers.py: our W1 beside NetKet's and Quantax's                               #
# --------------------------------------------------------------------------- #


def test_peers_table_says_not_installed_and_failed():
    peers = load("peers")
    rows = [dict(package="quantax_lite", status="measured", version="0.1.0", n_params=2424, n_samples=64,
                 step_s=0.1, step_min_s=0.09, energy_per_site=-0.5),
            dict(package="netket", status="not installed"),
            dict(package="quantax", status="failed", error="ImportError: x")]
    lines = peers.table(rows).splitlines()
    assert lines[2].split()[:6] == ["quantax_lite", "0.1.0", "2424", "64", "100.0", "90.0"]
    assert lines[3].split() == ["netket", "not", "installed"]
    assert lines[4].startswith("quantax") and "failed: ImportError: x" in lines[4]


@pytest.mark.slow  # end to end; the table and worker rows are tested without training
def test_peers_quick_records_ours_and_the_peers_that_are_not_installed(tmp_path):
    """--quick: our W1 row measured in its own process (the W1 network: 2424 parameters);
    NetKet and Quantax rows 'not installed' where they do not import (CI), measured where
    they do; nothing written without --json."""
    import importlib.util as iu

    out = tmp_path / "peers.json"
    proc = script("peers", "--quick", "--json", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.read_text())
    rows = {r["package"]: r for r in record["rows"]}
    assert list(rows) == ["quantax_lite", "netket", "quantax"] and record["quick"] is True
    ours = rows["quantax_lite"]
    assert ours["status"] == "measured" and ours["n_params"] == 2424 and ours["n_samples"] == 64
    assert positive(ours["step_s"]) and -0.75 < ours["energy_per_site"] < 0.0  # above E0/N = -0.7017
    for name in ("netket", "quantax"):
        expected = "measured" if iu.find_spec(name) else "not installed"
        assert rows[name]["status"] == expected, rows[name]
        assert f"{name:<13} not installed" in proc.stdout or expected == "measured"
    assert record["host"]["cpu_count"] == os.cpu_count()
    assert record["command"] == f"python benchmarks/peers.py --quick --json {shlex.quote(str(out))}"
    assert record["meta"]["backend"]  # the harness's fields
    default = BENCH / "results" / "peers.json"
    existed = default.exists()
    proc = script("peers", "--quick", "--only", "netket", timeout=120)
    assert proc.returncode == 0 and default.exists() == existed  # no --json: printed only


# --------------------------------------------------------------------------- #
# reproducibility.py: three runs of a row compared step by step              #
# --------------------------------------------------------------------------- #
def test_reproducibility_comparisons_find_the_first_difference():
    repro = load("reproducibility")
    rng = np.random.default_rng()
    log = [dict(iteration=i, energy=float(rng.normal()), energy_error=0.1, sr_fallback=False, r_hat=None,
                wall_time_s=float(i)) for i in range(1, 6)]
    clocked = [dict(r, wall_time_s=r["wall_time_s"] + 1.0) for r in log]  # the clock is no trajectory
    assert repro.compare_logs(log, clocked)["identical"]
    moved = [dict(r) for r in log]
    moved[3]["energy"] = np.nextafter(moved[3]["energy"], np.inf)  # one ulp at step 4
    moved[4]["energy_error"] = 0.2
    c = repro.compare_logs(log, moved)
    assert not c["identical"] and c["first_difference"] == 4
    assert 0 < c["max_abs_difference"]["energy"] < 1e-12 and c["max_abs_difference"]["energy_error"] == 0.1
    assert not repro.compare_logs(log, log[:-1])["identical"]
    nan = [dict(r, energy=float("nan")) for r in log]
    assert repro.compare_logs(nan, [dict(r) for r in nan])["identical"]
    assert repro.compare_logs(log, nan)["max_abs_difference"]["energy"] == math.inf

    params = {"w": rng.normal(size=(3, 4)).astype(np.float32), "key": np.arange(2, dtype=np.uint32)}
    assert repro.compare_parameters(params, {k: v.copy() for k, v in params.items()})["identical"]
    w = params["w"].copy()
    w[1, 2] *= 1.001
    c = repro.compare_parameters(params, dict(params, w=w))
    assert not c["identical"] and 0 < c["max_relative_difference"] < 1e-2
    assert not repro.compare_parameters(params, dict(params, key=np.array([0, 2], np.uint32)))["identical"]
    assert not repro.compare_summaries(dict(energy=-1.0, iterations=4), dict(energy=-1.0, iterations=5))["identical"]


@pytest.mark.slow  # end to end; bit-for-bit resumes are checked faster by test_cli.py's killed run and test_vmc.py
def test_reproducibility_quick_runs_are_identical_and_resumed_equals_straight(tmp_path, capsys):
    repro = load("reproducibility")
    json_path = tmp_path / "r.json"
    assert repro.main(["--quick", "--out", str(tmp_path / "runs"), "--json", str(json_path)]) == 0
    stored = json.loads(json_path.read_text())
    result = stored[jax.default_backend()]
    assert result["reproducible"] and result["resumed_at"] == 2 and result["again"]["log"]["steps"] == 4
    assert min(result[f"{run}_wall_time_s"] for run in ("first", "again", "resumed")) > 0
    assert "again      identical" in capsys.readouterr().out


def test_accuracy_archive_carries_the_compilation_cache_while_it_is_small(tmp_path, monkeypatch, capsys):
    import tarfile

    accuracy = load("accuracy")
    out = tmp_path / "runs"
    (out / "row").mkdir(parents=True)
    (out / "row" / "log.jsonl").write_text("{}\n")
    (out / "row" / ".lock").write_text("")
    (out / accuracy.CACHE_FOLDER / "x86_64-0").mkdir(parents=True)
    (out / accuracy.CACHE_FOLDER / "x86_64-0" / "jit_step-abc").write_bytes(np.random.default_rng().bytes(4000))
    archive = tmp_path / "runs.tgz"
    assert accuracy.pack_runs(str(out), str(archive))
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["compile_cache", "compile_cache/x86_64-0", "compile_cache/x86_64-0/jit_step-abc",
                                          "row", "row/log.jsonl"]
    monkeypatch.setattr(accuracy, "ARCHIVE_LIMIT", 2000)  # the cache's random bytes do not compress
    assert not accuracy.pack_runs(str(out), str(archive))
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["row", "row/log.jsonl"]
    assert "runs only" in capsys.readouterr().out
    back = tmp_path / "machine2"
    accuracy.unpack_runs(str(archive), str(back))
    assert (back / "row" / "log.jsonl").read_text() == "{}\n"


def test_reproducibility_comparisons_of_nulls_nans_and_repeated_steps():
    repro = load("reproducibility")
    assert repro._diff(None, None) == 0.0 and repro._diff(None, 1.0) == math.inf and repro._diff(1, 1.0) == 0.0
    assert not repro.compare_summaries(dict(energy=None), dict(energy=-1.0))["identical"]
    log = [dict(iteration=1, energy=-1.0, r_hat=None), dict(iteration=2, energy=-2.0, r_hat=None)]
    assert not repro.compare_logs(log, log + [dict(log[-1])])["identical"]  # a step logged twice
    assert not repro.compare_logs(log, [log[0], dict(log[1], r_hat=1.01)])["identical"]
    a = np.array([1.0, np.nan, 3.0], np.float32)
    assert repro.compare_parameters({"w": a}, {"w": a.copy()})["identical"]
    c = repro.compare_parameters({"w": a}, {"w": np.array([1.0, 2.0, 3.0], np.float32)})
    assert not c["identical"] and c["max_relative_difference"] == math.inf
    assert json.loads(json.dumps(repro._json_safe({"d": [math.inf, 1.5, math.nan]}), allow_nan=False)) == {
        "d": ["inf", 1.5, "nan"]}


def test_error_text_and_last_line_of_empty_messages():
    common = load("_common")
    assert common.error_text(ValueError("bad x\nmore")) == "ValueError: bad x"
    assert common.error_text(RuntimeError()) == "RuntimeError"
    assert common.error_text(KeyError("k" * 500)).startswith("KeyError: 'kkk") and len(common.error_text(
        KeyError("k" * 500))) <= len("KeyError: ") + 300
    assert common.last_line("a\nb\n\n") == "b" and common.last_line("  \n") is None and common.last_line(None) is None


@pytest.mark.slow  # end to end (eight trainings); the refusals: test_seed_spread_refuses_what_it_cannot_run_before_training (slow too: a process each)
def test_seed_spread_trains_each_seed_under_each_tuning(tmp_path, monkeypatch):
    """benchmarks/seed_spread.py: one run per seed and tuning record, each from its own seed
    (the runs differ), the "tpu" record really used (float32 device programs: the same seed's
    energy differs from the "cpu" run's), the spread computed from the runs, the JSON written."""
    seed_spread = load("seed_spread")
    accuracy = load("accuracy")
    tiny = dict(target=1e-2, args=["--lattice", "chain:8", "--channels", "2", "--depth", "1", "--samples", "32",
                                   "--iters", "50"])
    monkeypatch.setattr(accuracy, "SYSTEMS", {"tiny": tiny})
    monkeypatch.setitem(sys.modules, "accuracy", accuracy)
    json_path = tmp_path / "spread.json"
    result = seed_spread.main(["--row", "tiny", "--seeds", "0", "1", "--iters", "6", "--eval-samples", "64",
                               "--out", str(tmp_path / "runs"), "--json", str(json_path)])
    assert json.loads(json_path.read_text()) == json.loads(json.dumps(result))
    runs = {(r["tuning"], r["seed"]): r for r in result["runs"]}
    assert sorted(runs) == [("cpu", 0), ("cpu", 1), ("tpu", 0), ("tpu", 1)]
    assert all(r["iterations"] == 6 and positive(r["relative_error_bar"]) for r in runs.values())
    assert runs["cpu", 0]["energy"] != runs["cpu", 1]["energy"]
    assert runs["cpu", 0]["energy"] != runs["tpu", 0]["energy"]
    assert "--seed" not in result["options"] and "--iters 6" in result["options"]
    for name in ("cpu", "tpu"):
        errors = [runs[name, s]["relative_error"] for s in (0, 1)]
        assert result["spread"][name] == dict(n=2, median=sum(errors) / 2, min=min(errors), max=max(errors))


@pytest.mark.slow  # the script's refusals, each a process
def test_seed_spread_refuses_what_it_cannot_run_before_training(capsys):
    done = script("seed_spread", "--row", "nope", timeout=60)
    assert done.returncode == 2 and "error: --row" in done.stderr and "Traceback" not in done.stderr
    for argv, option in ((["--seeds", "1", "1"], "--seeds"),
                         (["--iters", "0"], "--iters"), (["--tunings", "cpu", "cpu"], "--tunings"),
                         (["--row", "j1j2_6x6_chip"], "--row"), (["--", "--no-such-option"], "options after --")):
        code, _, err = in_process(capsys, "seed_spread", *argv)
        assert code == 2 and f"error: {option}" in err and "Traceback" not in err, err


def _fake_run(folder, energies, walls, symmetry, n_sites=4, exact=-8.0):
    """A run folder with the given log (one line per step) and summary."""
    folder.mkdir(parents=True)
    with open(folder / "log.jsonl", "w") as fh:
        for k, (e, t) in enumerate(zip(energies, walls)):
            fh.write(json.dumps({"iteration": k + 1, "energy": e, "wall_time_s": t}) + "\n")
    (folder / "summary.json").write_text(json.dumps({"symmetry": symmetry, "n_sites": n_sites, "n_params": 7,
                                                     "exact_energy": exact}))


def test_training_curve_splits_stages_and_windows_and_averages_blocks(tmp_path, rng, capsys):
    """Stages from the run's symmetry, windows where the logged clock starts again, block
    means and their errors as numpy gives them, step times without the steps that start a
    window or a stage; an archive as accuracy.py packs it reads as its folders; a folder
    without a run, an empty log, two runs of one name, a block of no steps or a JSON path
    that cannot be written exit 2 with one line."""
    curve, accuracy = load("training_curve"), load("accuracy")
    energies = list(-8.0 + rng.random(7))
    # window 1: steps 1-5, the full group from step 4 after 3 s; window 2: steps 6-7. Full-group
    # steps of 1 s and 2 s: their median 1.5 s, 2 s with the switch, 1 s with the window's start
    walls = [10.0, 10.1, 10.2, 13.2, 14.2, 2.0, 4.0]
    _fake_run(tmp_path / "runs" / "a", energies, walls, "translations>full@3")
    r = curve.summarize(*curve.read_run(str(tmp_path / "runs" / "a")), block=2)
    assert r["windows"] == [dict(first_step=1, first_step_wall_s=10.0, last_step=5),
                            dict(first_step=6, first_step_wall_s=2.0, last_step=7)]
    trans, full = r["stages"]
    assert (trans["group"], trans["first_step"], trans["last_step"], trans["switch_s"]) == ("translations", 1, 3, None)
    assert trans["step_ms"] == pytest.approx(100.0)
    assert (full["group"], full["first_step"], full["last_step"], full["steps"]) == ("full", 4, 7, 4)
    assert full["switch_s"] == pytest.approx(3.0) and full["step_ms"] == pytest.approx(1500.0)
    e = np.array(energies)
    rel = (e + 8.0) / 8.0
    assert [b["first_step"] for b in full["relative_error"]] == [4, 6]
    assert full["relative_error"][1]["mean"] == pytest.approx(rel[5:7].mean())
    assert full["relative_error"][1]["error"] == pytest.approx(rel[5:7].std(ddof=1) / np.sqrt(2))
    assert trans["energy_per_site"][-1] == dict(first_step=3, last_step=3, mean=pytest.approx(e[2] / 4), error=None)
    assert "effective_samples" not in trans  # not logged: not reported
    # the effective sample fraction, per block, where every step logged it
    ess = list(0.1 + 0.2 * rng.random(7))
    log, summary, ends = curve.read_run(str(tmp_path / "runs" / "a"))
    weighted = curve.summarize([dict(x, effective_samples=f) for x, f in zip(log, ess)], summary, ends, block=2)
    assert weighted["stages"][1]["effective_samples"][0]["mean"] == pytest.approx(np.mean(ess[3:5]))
    # windows as accuracy.py lists them: found where the clock does not go back as well
    (tmp_path / "runs" / "a" / "accuracy_windows.json").write_text(json.dumps([dict(iterations=5), dict(iterations=7)]))
    assert curve.summarize(*curve.read_run(str(tmp_path / "runs" / "a")), block=2)["windows"] == r["windows"]
    steady = [10.0, 10.1, 10.2, 13.2, 14.2, 20.0, 22.0]  # window 2's first step later than window 1's last
    log, summary, ends = curve.read_run(str(tmp_path / "runs" / "a"))
    log = [dict(x, wall_time_s=t) for x, t in zip(log, steady)]
    assert [w["first_step"] for w in curve.summarize(log, summary, ends, block=2)["windows"]] == [1, 6]
    assert curve.summarize(log, summary, ends, block=2)["stages"][1]["step_ms"] == pytest.approx(1500.0)
    assert [w["first_step"] for w in curve.summarize(log, summary, None, block=2)["windows"]] == [1]
    # a window the file does not list (killed before it was recorded) is still found by its clock
    assert [w["first_step"] for w in curve.summarize(*curve.read_run(str(tmp_path / "runs" / "a"))[:2], [7],
                                                     block=2)["windows"]] == [1, 6]
    packed = tmp_path / "runs.tgz"
    accuracy.pack_runs(str(tmp_path / "runs"), str(packed))
    out = tmp_path / "c.json"
    done = script("training_curve", str(packed), "--block", "2", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["a"]["stages"][1]["relative_error"][0]["mean"] == pytest.approx(rel[3:5].mean())
    _fake_run(tmp_path / "empty" / "b", [], [], "translations")
    for bad, says in (([str(tmp_path)], "holds no run folder"), ([str(tmp_path / "empty")], "logged no step"),
                      ([str(packed), str(tmp_path / "runs")], "two runs named a"),
                      ([str(tmp_path / "runs"), "--block", "0"], "block"),
                      ([str(packed), "--json", str(tmp_path / "no" / "c.json")], "--json: cannot write")):
        code, _, err = in_process(capsys, "training_curve", *bad)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert says in err and "Traceback" not in err


def test_training_curve_reports_the_network_and_the_final_estimate(tmp_path, rng, capsys):
    """The run's network, samples per step and last estimate from fresh samples come from its
    summary (the relative error's error is the energy's over |exact|); a run stopped before
    its estimate has none."""
    curve = load("training_curve")
    _fake_run(tmp_path / "v", list(-8.0 + rng.random(3)), [1.0, 2.0, 3.0], "translations")
    summary_path = tmp_path / "v" / "summary.json"
    summary = json.loads(summary_path.read_text())
    energy, error = -7.9 + 0.05 * rng.random(), 0.01 + 0.01 * rng.random()
    summary.update(network="vit", network_options={"dim": 32}, n_samples=2048, energy=energy, energy_error=error,
                   relative_error=(energy + 8.0) / 8.0, v_score=0.02, estimate_symmetry="translations",
                   n_eval_samples=16384, wall_time_s=490.0)
    summary_path.write_text(json.dumps(summary))
    r = curve.summarize(*curve.read_run(str(tmp_path / "v")))
    assert (r["network"], r["network_options"], r["samples"]) == ("vit", {"dim": 32}, 2048)
    assert r["final"] == dict(energy=energy, energy_error=error, relative_error=(energy + 8.0) / 8.0, v_score=0.02,
                              estimate_symmetry="translations", n_eval_samples=16384, wall_time_s=490.0,
                              relative_error_bar=pytest.approx(error / 8.0))
    done = script("training_curve", str(tmp_path / "v"))
    assert done.returncode == 0 and f"{(energy + 8.0) / 8.0:.3g} ± {error / 8.0:.2g}" in done.stdout, done.stdout
    _fake_run(tmp_path / "w", [-7.5], [1.0], "translations")
    assert curve.summarize(*curve.read_run(str(tmp_path / "w")))["final"] is None
    unknown = dict(summary, exact_energy=None)  # a lattice without an exact energy (10x10): no relative error bar
    assert curve.final_estimate(unknown)["relative_error_bar"] is None
    summary_path.write_text(json.dumps(dict(summary, energy_error=None)))
    code, out, _ = in_process(capsys, "training_curve", str(tmp_path / "v"))
    assert code == 0 and f"{(energy + 8.0) / 8.0:.3g} (16384 fresh samples)" in out, out


@pytest.mark.slow  # trains a chain of 8 for 20 steps, then the step two ways (about a minute)
def test_lanczos_quick_compares_sampled_steps_with_the_dense_ones(tmp_path):
    out = tmp_path / "lanczos.json"
    proc = script("lanczos", "--quick", "--json", str(out), "--out", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    dense, sampled = result["dense"], result["sampled"]
    assert dense["two_steps"] <= dense["one_step"] <= dense["energy"] and dense["variance"] > 0
    assert dense["n_configurations"] == 70 and len(dense["variance_share"]) == 4
    assert sampled["sampled"]["samples_from"] == "the Lanczos state's own |psi_b|^2"
    assert sampled["from_psi_samples"]["samples_from"] == "|psi|^2"
    step = sampled["sampled"]
    assert abs(step["energy"] - dense["one_step"]) < 5 * step["error"] + 1e-9
    assert "one step from samples of psi_b" in proc.stdout and result["command"].startswith("python benchmarks/lanczos.py")


def test_lanczos_refuses_bad_options_in_one_line(tmp_path, capsys):
    for k, (args, option) in enumerate(((["--iters", "0"], "--iters"), (["--run", str(tmp_path / "none")], "--run"),
                                        (["--row", "no_such_row", "--iters", "1"], "--row"))):
        args = [*args, "--json", str(tmp_path / "x.json"), "--out", str(tmp_path / "r")]
        if k == 0:  # as a user runs it
            proc = script("lanczos", *args, timeout=120)
            code, err = proc.returncode, proc.stderr
        else:
            code, _, err = in_process(capsys, "lanczos", *args)
        assert code == 2, (args, err[-2000:])
        assert option in err.strip().splitlines()[-1]
        assert not (tmp_path / "x.json").exists()


# --------------------------------------------------------------------------- #
# tdvp_peers.py: our real-time TDVP beside NetKet's on the 4x4 quench          #
# --------------------------------------------------------------------------- #


def test_tdvp_peers_compares_rows_against_exact_and_says_not_installed_and_failed():
    tdvp_peers = load("tdvp_peers")
    exact = dict(t=[0.0, 0.1], sx=[1.0, 0.9], energy_per_site=[-3.04, -3.04])
    ours = dict(package="quantax_lite", status="measured", version="0.1.0", n_params=2432, n_samples=1024, steps=5,
                s_per_unit_time=10.0, evolve_s=1.0, warmup_s=3.0, sx=[1.0, 0.91], energy_per_site=[-3.04, -3.0])
    rows = [ours, dict(package="netket", status="not installed")]
    assert tdvp_peers.compare(rows, exact) == {"ratio": None, "as_accurate": None}
    assert ours["max_dsx"] == pytest.approx(0.01) and ours["max_denergy_per_site"] == pytest.approx(0.04)
    theirs = dict(ours, package="netket", s_per_unit_time=25.0, sx=[1.0, 0.95])
    comparison = tdvp_peers.compare([ours, theirs], exact)
    assert comparison["ratio"] == pytest.approx(2.5) and comparison["as_accurate"] is True
    worse = dict(ours, sx=[1.0, 0.8])  # 0.1 off: beyond NetKet's 0.05 and the 2e-2
    assert tdvp_peers.compare([worse, theirs], exact)["as_accurate"] is False
    lines = tdvp_peers.table([ours, dict(package="netket", status="failed", error="ImportError: x")]).splitlines()
    assert lines[2].split()[:8] == ["quantax_lite", "0.1.0", "2432", "1024", "5", "10.00", "200.0", "0.0100"]
    assert lines[3].startswith("netket") and "failed: ImportError: x" in lines[3]
    # the full sum: the +x state has <σx> = 1 and E/N = -h
    sx, energy = tdvp_peers.full_sum_observables(np.zeros(2**16))
    assert sx == pytest.approx(1.0) and energy == pytest.approx(-tdvp_peers.H)
    layers = tdvp_peers.initial_layers(8, 2, 0)
    assert sum(v.size for layer in layers.values() for v in layer.values()) == 2432
    assert not layers["readout"]["kernel"].any()


@pytest.mark.parametrize("symmetry", ["translations", "full"])
def test_tdvp_peers_flax_network_is_the_recipes(symmetry):
    """NetKet's row evaluates the recipe's network: the same log psi up to a constant (the
    translations' log 16, as ours counts the 16 equal images once) and 2 pi in the phase,
    from the same parameters; with ``--symmetry full`` both projected on the 256 elements of
    translations x C4v x spin inversion (theirs evaluating every image)."""
    tdvp_peers = load("tdvp_peers")
    from quantax_lite import Recipe, build

    r = build(Recipe(lattice="4x4", hamiltonian="tfim", h=3.04, amplitude="complex", marshall=False, samples=8,
                     sampling="metropolis", channels=2, depth=1, kernel_size=3, precision="f32", symmetry=symmetry))
    layers = tdvp_peers.initial_layers(2, 1, 3)
    layers["readout"]["kernel"] = np.random.default_rng(0).standard_normal((2, 2)).astype(np.float32)
    base = r.state.params["params"]["base"]
    ours = {"params": {"base": {"input_conv": layers["input_conv"], "readout_dense": layers["readout"],
                                "blocks_0": {"conv1": layers["blocks_0_conv1"], "conv2": layers["blocks_0_conv2"]}}}}
    assert jax.tree.map(np.shape, ours["params"]["base"]) == jax.tree.map(np.shape, base)
    s = jnp.asarray(np.random.default_rng(1).choice([-1, 1], size=(64, 16)), jnp.int8)
    theirs = tdvp_peers.flax_module(2, 1, symmetry).apply({"params": layers}, s)
    d = np.asarray(r.model.apply(ours, s)) - np.asarray(theirs)
    assert np.allclose(d.real, d.real[0], atol=1e-4) and np.allclose(np.exp(1j * d.imag), 1, atol=1e-4)
    if symmetry == "translations":
        assert np.allclose(d.real, np.log(16), atol=1e-4)
    perms, flips = load("_tdvp_flax").full_group()  # written without the library (NetKet's interpreter)
    from quantax_lite import Square
    from quantax_lite.geometry.symmetry import full_symmetry

    library = full_symmetry(Square(4))
    assert len(perms) == 256 and {(tuple(p), int(f)) for p, f in zip(perms, flips)} == \
        {(tuple(p), int(f)) for p, f in zip(library.perms, library.flips)}  # the library's group, element for element
    with pytest.raises(ValueError, match="symmetry"):
        tdvp_peers.flax_module(2, 1, "point")


@pytest.mark.slow  # a minute or more: our row (a recipe build and the step's compilation) and the exact propagator
def test_tdvp_peers_quick_measures_ours_and_says_netket_is_not_installed(tmp_path):
    """--quick: our row measured in its own process against exact; NetKet's 'not installed'
    where it does not import (CI), measured where it does; nothing written without --json."""
    import importlib.util as iu

    out = tmp_path / "tdvp_peers.json"
    proc = script("tdvp_peers", "--quick", "--json", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.read_text())
    rows = {r["package"]: r for r in record["rows"]}
    assert list(rows) == ["quantax_lite", "netket"] and record["quick"] is True
    ours = rows["quantax_lite"]
    assert ours["status"] == "measured" and ours["n_params"] == 100 and ours["n_samples"] == 64
    assert ours["steps"] == 2 and positive(ours["s_per_unit_time"]) and positive(ours["warmup_s"])
    assert record["exact"]["sx"][0] == pytest.approx(1.0) and ours["sx"][0] == pytest.approx(1.0)
    assert ours["max_dsx"] < 0.05  # two steps of 0.02 with 64 samples
    netket = rows["netket"]
    assert netket["status"] == ("measured" if iu.find_spec("netket") else "not installed"), netket
    if netket["status"] == "not installed":
        assert record["ratio"] is None and "netket        not installed" in proc.stdout
    assert record["host"]["cpu_count"] == os.cpu_count() and len(record["host"]["load_average"]) == 3
    default = BENCH / "results" / "tdvp_peers.json"
    existed = default.exists()
    proc = script("tdvp_peers", "--quick", "--only", "netket", timeout=120)
    assert proc.returncode == 0 and default.exists() == existed  # no --json: printed only
    proc = script("tdvp_peers", "--t-end", "0.3", "--points", "4", timeout=60)  # 15 steps over 4 points
    assert proc.returncode == 2 and "--t-end" in proc.stderr


# --------------------------------------------------------------------------- #
# evolution_targets.py: the sampled quench and imaginary time against exact    #
# --------------------------------------------------------------------------- #


@pytest.mark.slow  # two short sampled evolutions on 4x4
def test_evolution_targets_quick_compares_with_exact(capsys):
    """The quick run's rows carry the exact values beside the sampled ones, and the
    imaginary-time run ends with its energy's relative error against exact
    diagonalization; nothing is written without --json."""
    result = load("evolution_targets").main(["--quick"])
    q, m = result["quench"], result["imaginary"]
    assert [r["t"] for r in q["rows"]] == pytest.approx([0.0, 0.1, 0.2])
    for r in q["rows"]:
        assert r["d_sx"] == pytest.approx(r["sx"] - r["exact_sx"]) and positive(r["sx_error"] + 1e-300)
    assert abs(q["rows"][0]["exact_sx"] - 1.0) < 1e-12 and abs(q["rows"][0]["d_sx"]) < 0.05
    assert m["exact_e0"] < 0 and m["relative_error"] == pytest.approx((m["final_energy"] - m["exact_e0"]) / abs(m["exact_e0"]))
    assert "4x4 TFIM quench" in capsys.readouterr().out


@pytest.mark.slow  # the script's rows
def test_network_cost_quick(tmp_path):
    """The conv net and the ViT side by side: the ViT's projection evaluates one image per
    class of translations by whole patches (4 of 16 on 4x4), the conv net one per class of
    translations by whole cells (1), and the FLOPs per sample follow the images."""
    out = tmp_path / "cost.json"
    proc = script("network_cost", "--quick", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    rows = {r["network"]: r for r in result["rows"]}
    assert rows["conv"]["images"] == 1 and rows["vit"]["images"] == 4 and rows["vit"]["group_elements"] == 16
    assert all(positive(r["us_per_sample"]) and positive(r["flops_per_sample"]) for r in rows.values())
    assert rows["conv"]["time_vs_conv"] == 1.0 and result["lattice"] == "4x4"


def test_accelerator_suite_tdvp_part_keeps_the_failed_workers_progress(tmp_path, monkeypatch):
    """Where the tdvp part's row fails (a chip run once gave only "no result within 210 s"),
    the part records the worker's last progress lines beside the error, so the next run says
    where its time went; at most ``TDVP_PROGRESS_LINES`` of them."""
    import subprocess
    import types

    suite = load("accelerator_suite")
    lines = [f"[quantax_lite] {k:.1f} s: step {k}" for k in range(30)]

    def fake(cmd, timeout, **kwargs):
        path = cmd[cmd.index("--json") + 1]
        with open(path, "w") as fh:
            json.dump({"rows": [{"status": "failed", "error": "no result within 200 s"}]}, fh)
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="\n".join(lines) + "\n")

    monkeypatch.setattr(suite, "run_process_group", fake)
    args = types.SimpleNamespace(quick=False, tdvp_t_end=0.1)
    part = suite.run_tdvp(args, 210.0, str(tmp_path))
    assert part["error"] == "no result within 200 s"
    assert part["progress"] == lines[-suite.TDVP_PROGRESS_LINES:] and suite.TDVP_PROGRESS_LINES < len(lines)


def test_tdvp_peers_orbits_give_an_invariant_function_on_every_configuration():
    """``evaluate_all(..., symmetry="full")`` (one evaluation per orbit of the 256-element
    group, copied) equals the full evaluation for a function invariant under the group, and
    the 2^16 configurations fall into the 433 orbits of the full group (with spin inversion)."""
    tdvp_peers, flax_net = load("tdvp_peers"), load("_tdvp_flax")
    states = tdvp_peers.basis()
    reps, inverse = flax_net.orbits(states)
    assert len(reps) == 433 and inverse.shape == (2**16,)
    perms, flips = flax_net.full_group()
    rng = np.random.default_rng(0)
    weights = rng.standard_normal(16)

    def invariant(params, s):  # log sum over the group of exp(a random linear form): invariant
        s = np.asarray(s, np.float64)
        return np.log(np.sum(np.exp((flips[None, :, None] * s[:, perms]) @ weights), axis=1))

    some = rng.choice(2**16, 2000, replace=False)  # the function itself on a random part of the basis
    direct = invariant(None, states[some])
    np.testing.assert_allclose(tdvp_peers.evaluate_all(invariant, None, symmetry="full")[some], direct, rtol=1e-12)
    assert not np.allclose(direct, direct[0])  # not a constant


def test_tdvp_peers_passes_the_symmetry_to_its_workers(monkeypatch):
    """``--symmetry full`` reaches each worker's command line as the plain word (the worker
    parses it with its choices)."""
    tdvp_peers = load("tdvp_peers")
    seen = []
    monkeypatch.setattr(tdvp_peers, "worker_row", lambda name, cmd, timeout: seen.append(cmd) or {"status": "failed"})
    args = tdvp_peers.parse(["--symmetry", "full", "--samples", "200"])
    tdvp_peers.run_row("netket", sys.executable, args)
    cmd = seen[0]
    assert cmd[cmd.index("--symmetry") + 1] == "full" and cmd[cmd.index("--samples") + 1] == "200"
    worker_args = tdvp_peers.parse(cmd[2:cmd.index("--progress-log")])
    assert worker_args.symmetry == "full" and worker_args.worker == "netket"
