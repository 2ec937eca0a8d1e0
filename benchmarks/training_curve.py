"""A run's training, summarized from its run folder: per symmetry stage and per window.

Reads ``log.jsonl`` and ``summary.json`` of each run folder (or of every run folder of a
``.tgz`` archive, as ``benchmarks/accuracy.py --archive`` writes them) and reports, per
symmetry stage (``--symmetry translations>full@1800``: two stages), its steps, the median
time of a step (ms; the first step of each window and of each stage left out, as they
compile), the mean training energy per block of ``--block`` steps (per site, with the
error of the mean from the block's scatter, correlation between steps not counted) and,
where the run knows its exact energy, the block's relative error; per window (a call of
``benchmarks/accuracy.py``, as its ``accuracy_windows.json`` in the folder lists them, and
any new process where the logged wall time starts again, a window killed before it was
listed among them), its first
step and the wall time at which it came (s, from the start of that window's training,
after the run was built). The time of a stage's first step over its predecessor's
(``switch_s``) is what changing the group took inside a window: building the new stage,
compiling its programs, the checkpoint between. Beside them: the run's network, its samples
per step and its last estimate from fresh samples (``summary.json``).

    python benchmarks/training_curve.py RUN_DIR_OR_TGZ [...] [--block 100] [--json PATH]

Runs are named by their folders; two of the same name (from two archives) are refused.

Results: ``benchmarks/results/accuracy_chip_training.json`` for ``runs/chip/runs.tgz``;
``benchmarks/results/chip_network_probes.json`` (``--block 20``) for the probes of other
networks beside the J1-J2 row (docs/benchmarks.md).
Training energies are from each step's own samples: a curve, not an estimate of the
final state (``benchmarks/accuracy.py`` draws fresh samples for that).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def read_run(folder: str) -> tuple[list[dict], dict, list[int] | None]:
    """The log lines, the summary and the last step of each window (None without
    ``benchmarks/accuracy.py``'s list of windows) of the run folder ``folder``;
    ``ValueError`` naming it when its log holds no step."""
    from accuracy import WINDOWS, read_windows
    from quantax_lite.driver.run_folder import read_log  # drops a torn last line

    log = read_log(os.path.join(folder, "log.jsonl"))
    if not log:
        raise ValueError(f"paths: {folder} logged no step.")
    with open(os.path.join(folder, "summary.json")) as fh:
        summary = json.load(fh)
    if not os.path.isfile(os.path.join(folder, WINDOWS)):
        return log, summary, None
    listed = read_windows(folder)
    if not all(isinstance(w, dict) and "iterations" in w for w in listed):
        raise ValueError(f"paths: {os.path.join(folder, WINDOWS)} lists a window without its iterations.")
    return log, summary, [int(w["iterations"]) for w in listed]


def window_starts(steps: np.ndarray, wall: np.ndarray, ends: list[int] | None = None) -> list[int]:
    """Indices of the log where a window begins: the first line, the line after each
    window's last step ``ends`` (None: none listed), and every line whose wall time is below
    its predecessor's (a resumed process counts from its own start)."""
    listed = {int(i) + 1 for i in np.flatnonzero(np.isin(steps[:-1], ends))} if ends else set()
    return sorted({0} | listed | {i for i in range(1, len(wall)) if wall[i] < wall[i - 1]})


def blocks(values: np.ndarray, first_step: int, block: int) -> list[dict]:
    """Means of ``values`` (one per step, the first being step ``first_step``) per ``block``
    steps: ``{first_step, last_step, mean, error}`` (error: scatter / sqrt(n), None for one)."""
    out = []
    for a in range(0, len(values), block):
        part = values[a:a + block]
        error = float(part.std(ddof=1) / np.sqrt(len(part))) if len(part) > 1 else None
        out.append(dict(first_step=first_step + a, last_step=first_step + a + len(part) - 1,
                        mean=float(part.mean()), error=error))
    return out


def summarize(log: list[dict], summary: dict, ends: list[int] | None = None, block: int = 100) -> dict:
    """The stages and windows of one run (``log``, ``summary``, ``ends``: :func:`read_run`):
    ``{symmetry, network, network_options, n_params, samples, full_stage_samples,
    exact_energy, iterations, block, windows, stages, final}``, each window
    ``{first_step, first_step_wall_s, last_step}``, each stage ``{group, first_step,
    last_step, steps, step_ms, switch_s, energy_per_site}`` (and ``relative_error`` with an
    exact energy, ``effective_samples`` where every step logged it), the lists of :func:`blocks` of ``block`` steps; ``final``:
    :func:`final_estimate`."""
    from quantax_lite.recipes.stages import parse_symmetry

    if block < 1:
        raise ValueError(f"block: expected a positive number of steps, got {block}.")
    steps = np.array([int(x["iteration"]) for x in log])
    wall = np.array([float(x["wall_time_s"]) for x in log])
    per_site = np.array([float(x["energy"]) for x in log]) / int(summary["n_sites"])
    exact = summary.get("exact_energy")
    # Kish's effective sample fraction of each step, where the log has it (training on |psi|^(2a))
    effective = [x.get("effective_samples") for x in log]
    effective = np.array(effective, float) if all(e is not None for e in effective) else None
    starts = window_starts(steps, wall, ends)
    windows = [dict(first_step=int(steps[i]), first_step_wall_s=float(wall[i]),
                    last_step=int(steps[(starts + [len(steps)])[k + 1] - 1]))
               for k, i in enumerate(starts)]
    stages = []
    bounds = parse_symmetry(summary["symmetry"])
    for k, (group, begin) in enumerate(bounds):
        end = bounds[k + 1][1] if k + 1 < len(bounds) else np.inf
        idx = np.flatnonzero((steps > begin) & (steps <= end))
        if not len(idx):
            continue
        times = [wall[i] - wall[i - 1] for i in idx[1:] if i not in starts]
        first = int(idx[0])
        stage = dict(group=group, first_step=int(steps[first]), last_step=int(steps[idx[-1]]), steps=len(idx),
                     step_ms=float(np.median(times)) * 1e3 if times else None,
                     switch_s=float(wall[first] - wall[first - 1]) if first > 0 and first not in starts else None,
                     energy_per_site=blocks(per_site[idx], int(steps[first]), block))
        if exact is not None:
            rel = (per_site[idx] * int(summary["n_sites"]) - exact) / abs(exact)
            stage["relative_error"] = blocks(rel, int(steps[first]), block)
        if effective is not None:
            stage["effective_samples"] = blocks(effective[idx], int(steps[first]), block)
        stages.append(stage)
    return dict(symmetry=summary["symmetry"], network=summary.get("network"),
                network_options=summary.get("network_options"), n_params=summary.get("n_params"),
                samples=summary.get("n_samples"), full_stage_samples=summary.get("full_stage_samples"),
                exact_energy=exact, iterations=int(steps[-1]), block=block, windows=windows, stages=stages,
                final=final_estimate(summary))


def final_estimate(summary: dict) -> dict | None:
    """The run's last estimate from fresh samples, as its summary holds it (None before one):
    what ``benchmarks/accuracy.py`` keeps of a window's estimate (``ESTIMATE_KEYS``), its
    ``n_eval_samples``, ``wall_time_s`` (the last window's, s) and ``relative_error_bar``
    (the energy's error over |exact|, as in that script's rows; None without an exact energy)."""
    from accuracy import ESTIMATE_KEYS

    if summary.get("energy") is None:
        return None
    final = {k: summary.get(k) for k in ESTIMATE_KEYS + ("n_eval_samples", "wall_time_s")}
    exact, error = summary.get("exact_energy"), summary.get("energy_error")
    final["relative_error_bar"] = error / abs(exact) if exact and error is not None else None
    return final


def run_folders(path: str, scratch: str) -> list[str]:
    """The run folders of ``path``: itself when it holds a log, else its subfolders that do;
    a ``.tgz`` archive is unpacked into ``scratch`` first."""
    if os.path.isfile(path):
        from accuracy import unpack_runs  # the archives that script writes

        unpack_runs(path, scratch)
        path = scratch
    if os.path.isfile(os.path.join(path, "log.jsonl")):
        return [path]
    found = sorted(os.path.join(path, d) for d in os.listdir(path)
                   if os.path.isfile(os.path.join(path, d, "log.jsonl"))
                   and os.path.isfile(os.path.join(path, d, "summary.json")))
    if not found:
        raise ValueError(f"paths: {path} holds no run folder (log.jsonl and summary.json).")
    return found


def table(runs: dict) -> str:
    """The per-stage lines of ``runs`` as text."""
    lines = [f"{'run':34s} {'stage':12s} {'steps':>11s} {'ms/step':>8s} {'switch':>7s}  last block"]
    for name, r in runs.items():
        for s in r["stages"]:
            key = "relative_error" if "relative_error" in s else "energy_per_site"
            last = s[key][-1]
            switch = f"{s['switch_s']:.0f} s" if s["switch_s"] is not None else "-"
            ms = f"{s['step_ms']:.0f}" if s["step_ms"] is not None else "-"
            lines.append(f"{name:34s} {s['group']:12s} {s['first_step']:>5d}-{s['last_step']:<5d} {ms:>8s} "
                         f"{switch:>7s}  {key} {last['mean']:.4g} (steps {last['first_step']}-{last['last_step']})")
        final = r.get("final")
        if final and final["relative_error"] is not None:
            bar = f" ± {final['relative_error_bar']:.2g}" if final["relative_error_bar"] is not None else ""
            lines.append(f"{name:34s} {'final':12s} {'':11s} {'':8s} {'':7s}  relative_error "
                         f"{final['relative_error']:.3g}{bar} ({final['n_eval_samples']} fresh samples)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="run folders, folders of run folders, or .tgz archives of them")
    parser.add_argument("--block", type=int, default=100, help="steps per mean (default 100)")
    parser.add_argument("--json", help="write the summaries here")
    args = parser.parse_args(argv)
    runs, folder = {}, None
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for k, path in enumerate(args.paths):
                for folder in run_folders(path, os.path.join(scratch, str(k))):
                    name = os.path.basename(os.path.normpath(folder))
                    if name in runs:
                        raise ValueError(f"paths: two runs named {name} (give one of them)")
                    runs[name] = summarize(*read_run(folder), block=args.block)
    except KeyError as err:
        print(f"training_curve: {folder}: no {err} in its log or summary", file=sys.stderr)
        return 2
    except (OSError, ValueError, tarfile.TarError) as err:
        what = f"{err.filename}: {err.strerror}" if isinstance(err, OSError) and err.strerror else err
        print(f"training_curve: {what}", file=sys.stderr)
        return 2
    print(table(runs))
    if args.json:
        from quantax_lite.utils.files import atomic_write

        try:
            with atomic_write(args.json) as fh:
                json.dump(runs, fh, indent=1)
                fh.write("\n")
        except OSError as err:
            print(f"training_curve: --json: cannot write {args.json} ({err.strerror or err})", file=sys.stderr)
            return 2
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
