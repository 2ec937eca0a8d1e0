"""The benchmarks' harness: what the scripts of ``benchmarks/`` share, written once.

A benchmark is a thin script over it (``python benchmarks/NAME.py ...``; its parts that
grew large live in ``_NAME_*.py`` modules beside it):

- **before jax**: :func:`simulate_cpu_devices` (N simulated CPU devices; must run before
  jax is imported) and :func:`cpu_devices_env` (the same for a subprocess);
- **the backend**: :func:`detect_backend` (asked in a subprocess: a process that starts
  others which use the accelerator must not hold it), :func:`is_accelerator`,
  :func:`platform_kind` (``cpu``, ``gpu`` or ``tpu``) and :func:`on_accelerator`;
- **the machine**: :func:`platform_info` (jax, backend, devices, host),
  :func:`host_info` (stdlib only, for workers under any interpreter), :func:`cpu_model`
  and :func:`load_average`;
- **the record**: every JSON result a script writes carries the harness's fields
  :data:`RECORD_FIELDS`: ``command``, the command line that made it
  (:func:`command_line`), and ``meta``, the environment it ran in (:func:`environment`:
  :func:`platform_info` and the load average when it was written; keys of a script's own
  ``meta`` are kept over them). :func:`stamp` adds them, :func:`write_result` stamps and
  writes (:func:`write_json`: its folder made, the file replaced whole).
  :func:`add_json_option` is the ``--json`` option and :func:`output_path` the rule that a
  ``--quick`` run never writes the committed results unless told where;
- **timing**: :func:`clock` (one call, waited for), :func:`time_calls` and :func:`timed`
  (median and best after a warm-up call);
- **tables**: :class:`Table` (fixed-width columns: the header, a rule, the rows);
- **rows from worker processes** (a package under its own interpreter): :func:`worker_row`
  runs one and reads the row it reports (:func:`report_row`);
- **errors**: :func:`error_text` and :func:`last_line`, for a result's error field;
- **the parts of one VMC step**: :func:`chunk_sizes` and :func:`step_parts`;
- **compiled programs** (``_costs``, re-exported here): :func:`compile_part`,
  :func:`jaxpr_cost`, :func:`xla_flops`, :func:`memory_stats`, :func:`matmul_peak`,
  :func:`parse_dot`.

Nothing here imports jax when this module is imported (workers under other interpreters
import it); the functions that need jax import it when called.
"""
from __future__ import annotations

import argparse
import json
import os
import contextlib
import shlex
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # _costs, beside this file, however this module was loaded
    sys.path.insert(0, HERE)

from _costs import (compile_part, jaxpr_cost, matmul_peak, memory_stats, parse_dot,  # noqa: E402,F401
                    xla_flops)

ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
# the fields every JSON result carries (stamp)
RECORD_FIELDS = ("command", "meta")


def results_file(name: str) -> str:
    """``benchmarks/results/NAME`` (absolute): where a script's committed result lives."""
    return os.path.join(RESULTS, name)


# --------------------------------------------------------------------------- #
# before jax: simulated CPU devices                                            #
# --------------------------------------------------------------------------- #


def cpu_devices_env(n: int, env: dict | None = None) -> dict:
    """A copy of ``env`` (default ``os.environ``) for a process with ``n`` simulated CPU
    devices and only the CPU platform (``XLA_FLAGS``, ``JAX_PLATFORMS``)."""
    env = dict(os.environ if env is None else env)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={n}"])
    env["JAX_PLATFORMS"] = "cpu"
    return env


def simulate_cpu_devices(n: int | None) -> None:
    """Ask XLA for ``n`` simulated CPU devices; must run before jax is imported. None: leave as is."""
    if not n:
        return
    os.environ["XLA_FLAGS"] = cpu_devices_env(n)["XLA_FLAGS"]
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


# --------------------------------------------------------------------------- #
# the backend                                                                  #
# --------------------------------------------------------------------------- #


def detect_backend() -> str:
    """jax's default backend, asked in a subprocess (a process that starts others which use
    the accelerator must not open it first: one program at a time can hold a TPU)."""
    out = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"], capture_output=True,
                         text=True, timeout=300)
    lines = out.stdout.strip().splitlines()
    return lines[-1] if out.returncode == 0 and lines else "unknown"


def is_accelerator(backend: str) -> bool:
    return backend in ("gpu", "cuda", "rocm", "tpu")


def platform_kind(backend: str) -> str:
    """``"tpu"``, ``"gpu"`` (CUDA, ROCm) or ``"cpu"`` (anything else) of a jax backend name."""
    return "tpu" if backend == "tpu" else "gpu" if is_accelerator(backend) else "cpu"


def on_accelerator() -> bool:
    """Whether jax's default backend in this process is not the CPU (opens the backend)."""
    import jax

    return jax.default_backend() != "cpu"


# --------------------------------------------------------------------------- #
# the machine                                                                  #
# --------------------------------------------------------------------------- #


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages now (a shared machine's timings depend on it)."""
    return list(os.getloadavg())


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``, else ``lscpu``), or None."""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), None)
        if model:
            return model
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")]
    return names[0] if names else None


def host_info() -> dict:
    """This machine in words (stdlib only, for workers under any interpreter): CPU count and
    model, architecture, Python version and the load average now."""
    import platform as _platform

    return {"cpu_count": os.cpu_count(), "cpu_model": cpu_model(), "machine": _platform.machine(),
            "python": sys.version.split()[0], "load_average": load_average()}


def platform_info() -> dict:
    """jax version, backend, device kind and count, host CPU count."""
    import platform as _platform

    import jax

    devices = jax.devices()
    return dict(jax=jax.__version__, backend=jax.default_backend(), device_kind=devices[0].device_kind,
                n_devices=len(devices), devices=[str(d) for d in devices], cpu_count=os.cpu_count(),
                machine=_platform.processor() or _platform.machine(), python=_platform.python_version())


def environment() -> dict:
    """A result's ``meta``: :func:`platform_info` (where jax cannot start: the error and the
    host) and the load average now."""
    try:
        info = platform_info()
    except Exception as err:  # no jax here, or its backend failed: the result is still written
        host = host_info()
        info = dict(jax_error=error_text(err), cpu_count=host["cpu_count"], machine=host["machine"],
                    python=host["python"])
    info["load_average"] = load_average()
    return info


# --------------------------------------------------------------------------- #
# the record: command line, environment, JSON                                  #
# --------------------------------------------------------------------------- #


def script_parser(doc: str | None, **kwargs) -> argparse.ArgumentParser:
    """A script's parser: its docstring as the description, printed as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


def command_line(script: str, argv=None) -> str:
    """``python benchmarks/NAME.py ARGS`` of the script ``script`` (its path or name) with
    ``argv`` (default ``sys.argv[1:]``), each argument quoted for a POSIX shell."""
    name = os.path.basename(script)
    name = name if name.endswith(".py") else name + ".py"
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", f"benchmarks/{name}", *(shlex.quote(str(a)) for a in args)])


def stamp(result: dict, script: str, argv=None) -> dict:
    """``result`` with the harness's fields (:data:`RECORD_FIELDS`), in place: ``command``
    (:func:`command_line`; one already there is kept) and ``meta`` (:func:`environment`,
    under the keys of a ``meta`` already there)."""
    result.setdefault("command", command_line(script, argv))
    result["meta"] = {**environment(), **(result.get("meta") or {})}
    return result


def write_json(path: str, obj, indent: int | None = 1, newline: bool = False, **dump) -> None:
    """``obj`` as JSON to ``path`` (its folder made; written beside it, then renamed over it,
    so that a reader never sees half a file); ``dump``: more options of ``json.dump``."""
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path):  # /dev/null, a pipe: written as it is
        with open(path, "w") as fh:
            json.dump(obj, fh, indent=indent, **dump)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as fh:
            json.dump(obj, fh, indent=indent, **dump)
            if newline:
                fh.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_result(path: str, result: dict, script: str, argv=None, **kwargs) -> dict:
    """:func:`stamp` ``result`` and write it (:func:`write_json`, ``kwargs`` its options)."""
    write_json(path, stamp(result, script, argv), **kwargs)
    return result


def output_path(quick: bool, given: str | None, default: str | None) -> str | None:
    """The JSON to write: the path given; without one ``default`` on a full run and none on a
    ``--quick`` one (a smoke test never replaces the committed results)."""
    return given or (None if quick else default)


def add_json_option(parser: argparse.ArgumentParser, default: str | None = None, when: str = "always",
                    help: str | None = None) -> None:
    """The ``--json PATH`` option of a script. ``when``: ``"always"`` (``default`` unless
    given), ``"full"`` (``default`` on a full run only: see :func:`output_path`; the option's
    value is None unless given), ``"asked"`` (``--json`` alone writes ``default``; without it
    nothing), ``"given"`` (only where given). ``help``: more words after the rule."""
    where = default and os.path.relpath(default, ROOT)
    rule = {"always": f"result file (default {where})",
            "full": f"result file (default {where} on a full run; none with --quick unless given)",
            "asked": f"write the result (--json alone: {where}); without --json nothing is written",
            "given": "result file (none unless given)"}[when]
    text = rule + (f"; {help}" if help else "")
    if when == "asked":
        parser.add_argument("--json", nargs="?", const=default, default=None, metavar="PATH", help=text)
    else:
        parser.add_argument("--json", default=default if when == "always" else None, metavar="PATH", help=text)


# --------------------------------------------------------------------------- #
# timing                                                                       #
# --------------------------------------------------------------------------- #


def clock(fn, wait: bool = True):
    """``(value, seconds)`` of one call of ``fn``, its jax arrays waited for
    (``jax.block_until_ready``; ``wait`` False: not waited for, e.g. a build)."""
    t = time.perf_counter()
    value = fn()
    if wait:
        import jax

        value = jax.block_until_ready(value)
    return value, time.perf_counter() - t


def time_calls(fn, repeats: int, wait: bool = True) -> list[float]:
    """Seconds of ``repeats`` calls of ``fn`` (:func:`clock`), one after the other."""
    return [clock(fn, wait)[1] for _ in range(repeats)]


def timed(fn, repeats):
    """Median and minimum seconds of ``repeats`` calls of ``fn`` (after one call to compile
    and warm up); ``fn`` returns jax arrays, waited for with ``block_until_ready``."""
    clock(fn)
    times = time_calls(fn, repeats)
    return statistics.median(times), min(times)


# --------------------------------------------------------------------------- #
# tables                                                                       #
# --------------------------------------------------------------------------- #


class Table:
    """Fixed-width columns: ``Table(("chunk", 6), ("system", -26), ...)``, a name and a width
    each (a negative width left-aligns), one space between columns.

    ``header``: the names; ``rule``: dashes as long as the header; ``row(*cells)``: cells
    (``str()`` of each: format numbers first) in the columns; cells past the last column
    are appended as they are (a free-text tail)."""

    def __init__(self, *columns: tuple[str, int]):
        self.names = [name for name, _ in columns]
        self.widths = [width for _, width in columns]

    def row(self, *cells) -> str:
        fixed = [f"{str(c):<{-w}}" if w < 0 else f"{str(c):>{w}}" for c, w in zip(cells, self.widths)]
        return " ".join(fixed + [str(c) for c in cells[len(self.widths):]])

    @property
    def header(self) -> str:
        return self.row(*self.names)

    @property
    def rule(self) -> str:
        return "-" * len(self.header)


# --------------------------------------------------------------------------- #
# rows measured in worker processes (each package in its own interpreter)      #
# --------------------------------------------------------------------------- #

ROW_MARK = "PEER_RESULT "


def report_row(row: dict, mark: str = ROW_MARK) -> None:
    """A worker's row, printed as ``MARK {json}`` (the last such line of its stdout counts)."""
    print(mark + json.dumps(row), flush=True)


@contextlib.contextmanager
def terminate_as_exit():
    """Inside, SIGTERM raises ``SystemExit(143)`` in the main thread, so a ``subprocess.run``
    under way kills its child before this process ends: a worker must not outlive a parent
    stopped by ``timeout`` (on a TPU machine an orphan keeps the chip, and the next program
    cannot open it). Elsewhere than the main thread, nothing changes."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_IGN, None):  # ignored, or a handler not set from Python: left alone
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_process_group(cmd: list, timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, **kwargs)`` in a session of its
    own, whose every process is killed when ``timeout`` seconds pass (then
    ``subprocess.TimeoutExpired``) or this process is terminated (:func:`terminate_as_exit`):
    a script's own workers go with it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            **kwargs)
    try:
        with terminate_as_exit():
            out, err = proc.communicate(timeout=timeout)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def worker_row(name: str, cmd: list, timeout: float, mark: str = ROW_MARK, cwd: str = ROOT) -> dict:
    """Run the worker ``cmd`` (in ``cwd``) and read its row (:func:`report_row`):
    ``{"package": name, **row, "process_s"}``; ``"status": "failed"`` with the end of its
    error when it exits otherwise, prints no row, or gives none within ``timeout`` seconds.
    A SIGTERM to this process kills the worker too (:func:`terminate_as_exit`)."""
    t0 = time.perf_counter()
    try:
        with terminate_as_exit():
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        return {"package": name, "status": "failed", "error": f"no result within {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(mark)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"package": name, "status": "failed", "error": " | ".join(tail) or f"exit status {proc.returncode}"}
    return {"package": name, **json.loads(lines[-1][len(mark):]), "process_s": time.perf_counter() - t0}


# --------------------------------------------------------------------------- #
# errors                                                                       #
# --------------------------------------------------------------------------- #


def error_text(err: BaseException, limit: int = 300) -> str:
    """``"TypeName: first line of the message"`` (at most ``limit`` characters of it), for a
    result's error field."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:limit] if lines else ''}".rstrip(": ")


def last_line(text: str | None, limit: int = 300) -> str | None:
    """The last non-blank line of a process's output (at most ``limit`` characters), or None."""
    lines = (text or "").strip().splitlines()
    return lines[-1][:limit] if lines else None


# --------------------------------------------------------------------------- #
# the parts of one VMC step                                                    #
# --------------------------------------------------------------------------- #


def chunk_sizes(vmc, params):
    """``(local_energy_chunk, jacobian_chunk)`` of a driver's step, through its public API:
    ``vmc.chunk_sizes(params)`` where the driver chooses its chunks (``chunk_size="auto"``),
    else ``vmc.local_energy_chunk_size`` and ``vmc.chunk_size``."""
    if hasattr(vmc, "chunk_sizes"):
        sizes = vmc.chunk_sizes(params)
        return sizes[0], sizes[1]
    return vmc.local_energy_chunk_size, vmc.chunk_size


def step_parts(vmc, state, n_samples, prepare=None):
    """The four parts of one VMC step, each its own jitted program, with their inputs.

    Sampling (``vmc.sampler.sample``), local energies (``vmc.local_energies``), the
    per-sample Jacobian (``make_jacobian(derivative_form(vmc.log_psi), chunk_size=...)``
    at the step's Jacobian chunk) and the preconditioner's solve
    (``vmc.preconditioner.update`` at ``state``'s iteration). Each part runs once, in
    order, to make the next part's input.

    prepare: ``(name, jitted, args) -> callable`` applied to each part before it runs
      (default: the jitted function itself, compiled on its first call); e.g. an
      ahead-of-time compilation that also records the program's cost (:func:`compile_part`).

    Returns ``(parts, values)``: ``{name: (callable, args)}`` for sampling, local_energy,
    jacobian, solve, and ``{samples, log_psi, e_loc, jac}``.
    """
    import jax

    from quantax_lite.optimizer.log_derivatives import make_jacobian
    from quantax_lite.models import derivative_form

    prepare = prepare or (lambda name, fn, args: fn)
    p = state.params
    parts = {}

    def part(name, fn, *args):
        fn = prepare(name, fn, args)
        parts[name] = (fn, args)
        return fn(*args)

    samples, lp, _ = part("sampling", jax.jit(lambda st, p: vmc.sampler.sample(st, p, n_samples)), state.sampler, p)
    e = part("local_energy", jax.jit(vmc.local_energies), p, samples, lp)
    jac = make_jacobian(derivative_form(vmc.log_psi), chunk_size=chunk_sizes(vmc, p)[1])
    O = part("jacobian", jac, p, samples)
    solve = jax.jit(lambda O, e: vmc.preconditioner.update(O, e, state.preconditioner, step=state.iteration)[0])
    part("solve", solve, O, e)
    return parts, dict(samples=samples, log_psi=lp, e_loc=e, jac=O)
