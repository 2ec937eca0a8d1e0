"""benchmarks/jacobian_sharding.py's output: the summary lines, the markdown tables of a
result file (``--markdown``: :func:`markdown`, :func:`markdown_tpu`) and the plot."""
from __future__ import annotations

from _sharding_cases import MODES

def summary(rows: list[dict]) -> list[str]:
    """One line per (conv, D, chunk): all-gathers False/True and the speed-up."""
    lines = []
    pairs = _pairs(rows, lambda r: (r["conv"], r["chunk_size"], r["devices"]))
    for _, f, r in sorted(pairs, key=lambda p: p[0]):
        lines.append(f"{r['conv']:>6} D={r['devices']} chunk={r['chunk_size']:>3}: all-gathers "
                     f"{f['collectives']['all-gather']['count']} vs {r['collectives']['all-gather']['count']}, "
                     f"{f['ms_per_sample']:.2f} vs {r['ms_per_sample']:.2f} ms/sample, "
                     f"shard_batch=True {r['speedup_true_over_false']:.2f}x faster "
                     f"(CPU time {f['cpu_seconds'] / r['cpu_seconds']:.2f}x less)")
    return lines


def _mib(x) -> str:
    return "-" if x is None else f"{x / 2**20:.1f}"


def _pairs(rows: list[dict], key) -> list[tuple]:
    """(key, row with shard_batch False, row with True) for every case measured in both modes."""
    by = {}
    for r in rows:
        if "collectives" in r:
            by.setdefault(key(r), {})[r["shard_batch"]] = r
    return [(k, v[False], v[True]) for k, v in by.items() if False in v and True in v]


def _gathers(r: dict) -> str:
    ag = r["collectives"]["all-gather"]
    return f"{ag['count']} ({ag['arrays']})" if ag["count"] else "0"


def _others(r: dict) -> int:
    return sum(v["count"] for k, v in r["collectives"].items() if k != "all-gather")


def markdown(result: dict) -> str:
    """The measured and the compile-only tables of a result file, as markdown: one line per
    case, shard_batch False / True side by side."""
    out = ["| conv | D | chunk | all-gathers F / T | other coll. F / T | gathered MiB/call (F) | memory MiB F / T "
           "| ms/sample F / T | CPU ms/sample F / T | T faster by | max rel. dJ |", "|" + " --- |" * 11]
    for (conv, D, c), f, t in _pairs(result["rows"], lambda r: (r["conv"], r["devices"], r["chunk_size"])):
        out.append(f"| {conv} | {D} | {c} | {_gathers(f)} / {_gathers(t)} | {_others(f)} / {_others(t)} | "
                   f"{_mib(f['collectives']['all-gather']['bytes_per_call'])} | {_mib(f['peak_bytes'])} / "
                   f"{_mib(t['peak_bytes'])} | {f['ms_per_sample']:.2f} / {t['ms_per_sample']:.2f} | "
                   f"{f['cpu_ms_per_sample']:.2f} / {t['cpu_ms_per_sample']:.2f} | "
                   f"{f['seconds'] / t['seconds']:.1f}x | {t.get('rel_diff_modes', float('nan')):.0e} |")
    missing = [r for r in result["rows"] if "collectives" not in r]
    for r in missing:
        out.append(f"| {r.get('conv')} | {r.get('devices')} | {r.get('chunk_size')} | shard_batch="
                   f"{r.get('shard_batch')}: {r.get('error') or r.get('skipped')} |" + " |" * 7)
    topo = result.get("topology_rows") or []
    if topo:
        out += ["", "| topology | GPUs | conv | chunk | all-gathers F / T | other coll. F / T "
                "| gathered MiB/call (F) | memory MiB F / T |", "|" + " --- |" * 8]
        key = lambda r: (r["topology"], r["devices"], r["conv"], r["chunk_size"])  # noqa: E731
        for (name, D, conv, c), f, t in _pairs(topo, key):
            out.append(f"| {name} | {D} | {conv} | {c} | {_gathers(f)} / {_gathers(t)} | {_others(f)} / "
                       f"{_others(t)} | {_mib(f['collectives']['all-gather']['bytes_per_call'])} | "
                       f"{_mib(f['peak_bytes'])} / {_mib(t['peak_bytes'])} |")
        for r in topo:
            if "collectives" not in r:
                out.append(f"| {r.get('topology')} | {r.get('conv', '')} {r.get('chunk_size', '')} "
                           f"{r.get('shard_batch', '')}: {r.get('error') or r.get('skipped')} |" + " |" * 6)
    if result.get("tpu"):
        out += ["", markdown_tpu(result["tpu"])]
    return "\n".join(out)


def _count(r: dict, kind: str) -> str:
    c = r["collectives"][kind]
    return f"{c['count']} ({c['arrays']})" if c["count"] else "0"


def _rest(r: dict) -> int:
    return sum(v["count"] for k, v in r["collectives"].items() if k not in ("all-gather", "all-reduce"))


def _g(x, fmt="{:.3g}") -> str:
    return "-" if x is None else fmt.format(x)


def _peak(r: dict) -> str:
    """XLA's peak memory of the program (filled in on TPU), else arguments + outputs + scratch."""
    return _mib(r.get("xla_peak_bytes") or r.get("peak_bytes"))


def markdown_tpu(tpu: dict) -> str:
    """The tables of a ``--platform tpu`` result (the ``"tpu"`` entry of a result file): the
    real chip (D = 1, compiled, run and timed) and the compile-only TPU v5e slices."""
    kind = tpu.get("device_kind") or "TPU"
    spec = tpu.get("spec") or {}
    out = [f"TPU: {kind}, jax {tpu.get('jax')}, {spec.get('dtype')}, jax_enable_x64 {tpu.get('x64')}, "
           f"{spec.get('per_device')} samples per chip", ""]
    out += ["| conv | D | chunk | all-gathers F / T | all-reduces F / T | other coll. F / T | peak MiB F / T "
            "| ms/sample F / T | compile s F / T | T faster by | max rel. dJ |", "|" + " --- |" * 11]
    for (conv, D, c), f, t in _pairs(tpu.get("rows") or [], lambda r: (r["conv"], r["devices"], r["chunk_size"])):
        ratio = f["seconds"] / t["seconds"] if f.get("seconds") and t.get("seconds") else None
        out.append(f"| {conv} | {D} | {c} | {_count(f, 'all-gather')} / {_count(t, 'all-gather')} | "
                   f"{_count(f, 'all-reduce')} / {_count(t, 'all-reduce')} | {_rest(f)} / {_rest(t)} | "
                   f"{_peak(f)} / {_peak(t)} | {_g(f.get('ms_per_sample'))} / {_g(t.get('ms_per_sample'))} | "
                   f"{_g(f.get('compile_s'))} / {_g(t.get('compile_s'))} | {_g(ratio, '{:.2f}x')} | "
                   f"{_g(t.get('rel_diff_modes'), '{:.0e}')} |")
    for r in tpu.get("rows") or []:
        if "collectives" not in r:
            out.append(f"| {r.get('conv')} | {r.get('devices')} | {r.get('chunk_size')} | shard_batch="
                       f"{r.get('shard_batch')}: {r.get('error') or r.get('skipped')} |" + " |" * 7)
    out += ["", "| topology | chips | conv | chunk | all-gathers F / T | all-reduces F / T | other coll. F / T "
            "| gathered MiB/call (F) | peak MiB F / T | compile s F / T |", "|" + " --- |" * 10]
    key = lambda r: (r["topology"], r["devices"], r["conv"], r["chunk_size"])  # noqa: E731
    for (name, D, conv, c), f, t in _pairs(tpu.get("topology_rows") or [], key):
        out.append(f"| {name} | {D} | {conv} | {c} | {_count(f, 'all-gather')} / {_count(t, 'all-gather')} | "
                   f"{_count(f, 'all-reduce')} / {_count(t, 'all-reduce')} | {_rest(f)} / {_rest(t)} | "
                   f"{_mib(f['collectives']['all-gather']['bytes_per_call'])} | {_peak(f)} / {_peak(t)} | "
                   f"{_g(f.get('compile_s'))} / {_g(t.get('compile_s'))} |")
    for r in tpu.get("topology_rows") or []:
        if "collectives" not in r:
            out.append(f"| {r.get('topology')} | {r.get('devices', '')} | {r.get('conv', '')} | "
                       f"{r.get('chunk_size', '')} | shard_batch={r.get('shard_batch', '')}: "
                       f"{r.get('error') or r.get('skipped')} |" + " |" * 5)
    for e in tpu.get("errors") or []:
        out.append(f"\nerror: {e}")
    return "\n".join(out)


def plot(rows: list[dict], path: str, title: str):
    """Time per sample and all-gather count vs device count, one line per mode (and conv)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "topology" not in r and "collectives" in r]
    chunks = sorted({r["chunk_size"] for r in rows})
    convs = sorted({r["conv"] for r in rows}, key=lambda c: c != "lax")
    if not rows:
        return
    fig, axes = plt.subplots(2, len(chunks), figsize=(max(6.0, 4.2 * len(chunks)), 6.6), squeeze=False, sharex=True)
    style = {False: dict(color="tab:red", marker="o"), True: dict(color="tab:blue", marker="s")}
    for j, c in enumerate(chunks):
        for conv in convs:
            for sb in MODES:
                sel = sorted((r for r in rows if r["chunk_size"] == c and r["conv"] == conv and r["shard_batch"] == sb),
                             key=lambda r: r["devices"])
                if not sel:
                    continue
                D = [r["devices"] for r in sel]
                kw = dict(style[sb], linestyle="-" if conv == "lax" else ":", alpha=1.0 if conv == "lax" else 0.6,
                          label=f"{conv}, shard_batch={sb}")
                axes[0, j].plot(D, [r["ms_per_sample"] for r in sel], **kw)
                axes[1, j].plot(D, [r["collectives"]["all-gather"]["count"] for r in sel], **kw)
        axes[0, j].set_title(f"chunk_size = {c}")
        axes[0, j].set_yscale("log")
        axes[1, j].set_xscale("log", base=2)
        axes[1, j].set_xticks(sorted({r["devices"] for r in rows}))
        axes[1, j].set_xticklabels(sorted({r["devices"] for r in rows}))
        axes[1, j].set_xlabel("devices")
    axes[0, 0].set_ylabel("ms per sample (wall)")
    axes[1, 0].set_ylabel("all-gathers in compiled HLO")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
