"""Open-domain heavy hitters: our PEM against pure-ldp's PEM, TreeHist and SFP on the same strings.

    .venv/bin/python -m experiments.heavy_hitters --json experiments/results/heavy_hitters.json \
        --plot experiments/results/heavy_hitters.png [--peers] [--epsilons 2,4,8] [--ns 100000,1000000]

Population (``bench.heavy_hitters.zipf_population``): Zipf(``s``) over ``--strings`` random ``B``-byte
strings, ``n`` users drawn from it. Grid: every epsilon x n x Zipf exponent x string length x seed.
Scores (``bench.heavy_hitters.score``): recall of the strings with true frequency >= ``--heavy`` (0.2%),
precision counting reported strings with true frequency >= ``--useful`` (0.1%), F1, and the coverage of the
reported 95% intervals; time per million reports (encode, and aggregate + estimate), wall and CPU
(``*_cpu_s_per_million``: the process's CPU time, steadier on a shared machine), and the process's peak
resident memory so far (``peak_rss_mb``).

With ``--peers`` the first ``--peer_n`` users of the same population go to pure-ldp 1.2.0's heavy hitters
(``PEMServer``, ``TreeHistServer``, ``SFPServer``) in a subprocess of the side environment
``.cache/peers-venv`` (``bench.oracles.ensure_peer_venv``; never ``.venv``), each run killed after
``--peer_timeout`` seconds, and ours runs on the same subsample, so the two are compared at equal ``n``.
pure-ldp's default oracle (OLH) allocates and scans an array of the whole domain per level (``2**(8 B)``
entries: 32 GiB at 4 bytes), so the peers run over its Hadamard Count Mean Sketch (Apple's HCMS, the
library's own sketch oracle, ``--peer_sketch K,M``) with the strings as bit strings (alphabet ``0``/``1``);
``--peer_oracle olh`` keeps the default, for short strings.

``--summarize JSON [JSON ...]`` prints the markdown table of the write-up (means over seeds, and
:func:`model_recall`'s expected recall for ours); ``--replot PNG JSON [JSON ...]`` draws the records of
several runs in one figure.

This file is also the peer runner: ``PYTHON experiments/heavy_hitters.py --peer-run SPEC.json`` in the
side environment reads the subsample and parameters and prints one JSON record per method; that code path
imports only numpy, the standard library and pure_ldp.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PEER_METHODS = ("PEM", "TreeHist", "SFP")


# ---------------------------------------------------------------- peer side (pure-ldp, side environment)


def _numpy2_compat() -> None:
    """pure-ldp 1.2.0 sizes a sketch oracle's unused domain array with ``np.zeros(None)``, which numpy 2
    refuses; within this process that call gets an empty array (nothing else in pure-ldp changes)."""
    import types

    import pure_ldp.core._freq_oracle_server as fos

    def zeros(shape: Any, *a: Any, **kw: Any) -> np.ndarray:
        return np.zeros(0 if shape is None else shape, *a, **kw)

    fos.np = types.SimpleNamespace(**{**vars(np), "zeros": zeros})


def _peer_objects(method: str, eps: float, bits: int, spec: dict[str, Any]) -> tuple[Any, Any]:
    """A pure-ldp client and server for ``method`` over ``bits``-bit strings, on HCMS or OLH."""
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.apple_sfp import SFPClient, SFPServer
    from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
    from pure_ldp.heavy_hitters.treehistogram import TreeHistClient, TreeHistServer

    _numpy2_compat()
    k, m = spec["sketch"]
    server_fo: Any = None  # the library's default oracle, OLH over the whole domain
    client_fo: Any = None
    if spec["oracle"] == "hcms":
        server_fo = CMSServer(eps, k, m, is_hadamard=True)
        client_fo = CMSClient(eps, server_fo.get_hash_funcs(), m, is_hadamard=True)
    frag = spec["fragment_bits"]
    if method == "PEM":
        start = spec["start_bits"]
        return (
            PEMClient(eps, start, bits, frag, fo_client=client_fo),
            PEMServer(eps, start, bits, frag, fo_server=server_fo),
        )
    if method == "TreeHist":
        return (
            TreeHistClient(eps, frag, bits, fo_client=client_fo),
            TreeHistServer(eps, bits, frag, fo_server=server_fo),
        )
    bits01 = {"0", "1"}  # SFP's server adds its padding character to the alphabet: a set, not a list
    return (
        SFPClient(eps, frag, bits, alphabet=bits01, fo_client=client_fo),
        SFPServer(eps, frag, bits, alphabet=bits01, fo_server=server_fo),
    )


def peer_run(spec_path: str) -> int:
    """Runs every peer method of ``spec_path`` on its subsample; prints one JSON record per method."""
    import random

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    raw = np.load(spec["values"])
    bits = raw.shape[1] * 8
    strings = ["".join(f"{b:08b}" for b in row) for row in raw.tolist()]
    random.seed(spec["seed"])
    np.random.seed(spec["seed"] % 2**32)
    client, server = _peer_objects(spec["method"], spec["epsilon"], bits, spec)
    t0, c0 = time.perf_counter(), time.process_time()
    reports = [client.privatise(s) for s in strings]
    t1, c1 = time.perf_counter(), time.process_time()
    for r in reports:
        server.aggregate(r)
    found, freqs = server.find_heavy_hitters(k=spec["top_k"])
    t2, c2 = time.perf_counter(), time.process_time()
    whole = [v for v in found if len(v) == bits and set(v) <= {"0", "1"}]
    values = [int(v, 2).to_bytes(bits // 8, "big").hex() for v in whole]
    print(json.dumps({
        "values": values,
        "estimates": [float(f) / len(strings) for f in list(freqs)[: len(values)]],
        "encode_s": t1 - t0,
        "estimate_s": t2 - t1,
        "encode_cpu_s": c1 - c0,
        "estimate_cpu_s": c2 - c1,
    }))
    return 0


# ---------------------------------------------------------------- our side


class _Found:
    """A peer's reported string in the shape ``bench.heavy_hitters.score`` reads (no interval)."""

    def __init__(self, value: bytes) -> None:
        self.value = value
        self.ci_low = float("nan")
        self.ci_high = float("nan")


class _PeerResult:
    def __init__(self, values: list[bytes]) -> None:
        self.hitters = [_Found(v) for v in values]


def _truth_of(raw: np.ndarray) -> dict[bytes, float]:
    uniq, counts = np.unique(raw, axis=0, return_counts=True)
    return {bytes(u): c / raw.shape[0] for u, c in zip(uniq, counts)}


def recall_by_band(result: Any, truth: dict[bytes, float], heavy: float) -> list[dict[str, Any]]:
    """Recall of the heavy strings per band of true frequency: ``[heavy, 1.5 heavy)``, ``[1.5, 2.5)``,
    ``[2.5, 5)`` and ``>= 5`` times ``heavy``."""
    found = {h.value for h in result.hitters}
    edges = [heavy, 1.5 * heavy, 2.5 * heavy, 5 * heavy, float("inf")]
    out = []
    for lo, hi in zip(edges, edges[1:]):
        band = [v for v, f in truth.items() if lo <= f < hi]
        out.append({"low": lo, "high": None if hi == float("inf") else hi, "strings": len(band),
                    "found": sum(1 for v in band if v in found)})  # fmt: skip
    return out


def run_ours(batch: Any, truth: dict[bytes, float], eps: float, args: argparse.Namespace, seed: int) -> dict:
    """Our PEM (default layout: sketch search and verification) on ``batch``, scored against ``truth``."""
    from bench.heavy_hitters import score
    from ldp.heavy_hitters import PEM

    n = len(batch)
    pem = PEM(eps, batch.max_length, top_k=args.top_k, expected_n=n)
    t0, c0 = time.perf_counter(), time.process_time()
    reports = pem.encode(batch, rng=np.random.default_rng([seed, 1]))
    t1, c1 = time.perf_counter(), time.process_time()
    result = pem.estimate(pem.add(pem.create_accumulator(), reports))
    t2, c2 = time.perf_counter(), time.process_time()
    row = score(result, truth, args.heavy, args.useful)
    row["recall_by_band"] = recall_by_band(result, truth, args.heavy)
    row.update(
        library="ldp-beam", method="pem", encode_s_per_million=(t1 - t0) * 1e6 / n,
        estimate_s_per_million=(t2 - t1) * 1e6 / n, layout=repr(pem),
        encode_cpu_s_per_million=(c1 - c0) * 1e6 / n, estimate_cpu_s_per_million=(c2 - c1) * 1e6 / n,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,  # Linux: KiB
    )
    return row


def run_peer(method: str, raw: np.ndarray, eps: float, args: argparse.Namespace, seed: int) -> dict:
    """One pure-ldp method on ``raw`` (one string per row) in the side environment; scored here."""
    from bench.heavy_hitters import score
    from bench.oracles import ensure_peer_venv

    py = ensure_peer_venv()
    k, m = (int(x) for x in args.peer_sketch.split(","))
    frag = args.peer_fragment_bits
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "values.npy"), raw)
        spec = {
            "values": os.path.join(tmp, "values.npy"), "method": method, "epsilon": eps, "seed": seed,
            "top_k": args.top_k, "sketch": [k, m], "oracle": args.peer_oracle, "fragment_bits": frag,
            "start_bits": frag,
        }
        Path(tmp, "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        cmd = [str(py), str(Path(__file__).resolve()), "--peer-run", os.path.join(tmp, "spec.json")]
        t0 = time.perf_counter()
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.peer_timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"library": "pure-ldp", "method": method, "status": f"timeout {args.peer_timeout}s"}
        wall = time.perf_counter() - t0
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"library": "pure-ldp", "method": method, "status": f"failed: {last[:200]}"}
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    found = [bytes.fromhex(v) for v in rec["values"]]
    row = score(_PeerResult(found), _truth_of(raw), args.heavy, args.useful)
    row.pop("coverage")
    n = raw.shape[0]
    row.update(
        library="pure-ldp", method=method, status="ok", wall_s=wall, oracle=args.peer_oracle,
        sketch=[k, m] if args.peer_oracle == "hcms" else None, fragment_bits=frag,
        encode_s_per_million=rec["encode_s"] * 1e6 / n, estimate_s_per_million=rec["estimate_s"] * 1e6 / n,
        encode_cpu_s_per_million=rec["encode_cpu_s"] * 1e6 / n,
        estimate_cpu_s_per_million=rec["estimate_cpu_s"] * 1e6 / n,
    )
    return row


def model_recall(
    eps: float, n: int, nbytes: int, zipf: float, strings: int, heavy: float, reported: float
) -> float:
    """Expected recall of a Gaussian model of our default layout at one point (no hash collisions).

    A heavy string of frequency ``f`` is published when its estimate clears every search level's cut and
    the verification test: at a level of ``n_j`` users its estimate is ``f`` plus noise of sd
    ``sqrt((var + f (1 - f)) / n_j)`` (``var`` the level oracle's per-user variance, ``f (1 - f)`` the
    sampling of the level's users), against a cut at ``z`` null sds ``sqrt(var / n_j)``. The first level
    keeps 2048 of ``2**22`` prefixes (cut at the 2048th largest of ``2**22`` null z-scores, 3.3), the next
    ones 2048 of ``2048 * 2**e`` for ``e`` extension bits (3.7 for 13), and Benjamini-Hochberg at 0.05
    over 2048 verified strings with ``reported`` discoveries publishes above
    ``z = Phi^-1(1 - 0.05 reported / 2048)``. The frequencies are Zipf's
    expected ones over ``strings`` values.
    """
    from scipy.stats import norm

    from ldp.heavy_hitters import PEM

    pem = PEM(eps, nbytes, top_k=64, expected_n=n)
    w = np.arange(1, strings + 1, dtype=np.float64) ** -zipf
    f = (w / w.sum())[: int(np.sum(w / w.sum() >= heavy))]
    keep = float(pem.candidates)
    z_verify = norm.isf(0.05 * max(reported, 1.0) / keep)
    p_found = np.ones_like(f)
    for j, lv in enumerate(pem.levels):
        var = lv.q * (1 - lv.q) / (lv.p - lv.q) ** 2
        nj = pem.weights[j] * n
        sd0 = math.sqrt(var / nj)  # a null prefix's sd; a heavy one's adds who lands in the level
        sd = np.sqrt((var + f * (1 - f)) / nj)
        if lv.verify:
            z = z_verify
        else:
            z = norm.isf(keep / 2.0 ** lv.bits) if j == 0 else norm.isf(1.0 / 2.0 ** lv.extension_bits)
        p_found *= norm.sf((z * sd0 - f) / sd)
    return float(p_found.mean()) if f.size else 1.0


def _point(args: argparse.Namespace, eps: float, n: int, zipf: float, nbytes: int, seed: int) -> list[dict]:
    """Every method at one grid point: ours at ``n``; with peers, the peers and ours at ``--peer_n``."""
    from bench.heavy_hitters import zipf_population
    from ldp.heavy_hitters import StringBatch

    rng = np.random.default_rng([seed, nbytes, int(zipf * 100), n])
    batch, truth = zipf_population(n, args.strings, nbytes, zipf, rng)
    common = {"epsilon": eps, "zipf": zipf, "bytes": nbytes, "seed": seed}
    peers = args.peers and args.peer_n <= n and n == min(args.ns)
    rows = []
    if not (peers and args.peer_n == n):
        rows.append({**run_ours(batch, truth, eps, args, seed), **common, "n": n, "truth": "population"})
    if peers:
        raw = batch.data[: args.peer_n]
        sub = StringBatch(raw, batch.lengths[: args.peer_n], nbytes)
        sub_truth = _truth_of(raw)
        rows.append({**run_ours(sub, sub_truth, eps, args, seed), **common, "n": args.peer_n,
                     "truth": "subsample"})  # fmt: skip
        for method in args.peer_methods:
            rows.append({**run_peer(method, raw, eps, args, seed), **common, "n": args.peer_n,
                         "truth": "subsample"})  # fmt: skip
    return rows


def _fmt(r: dict) -> str:
    if r.get("status", "ok") != "ok":
        return f"{r['library']:>9} {r['method']:>8} n={r['n']:>8} eps={r['epsilon']:g}: {r['status']}"
    return (
        f"{r['library']:>9} {r['method']:>8} n={r['n']:>8} eps={r['epsilon']:g} zipf={r['zipf']:g} "
        f"B={r['bytes']} seed={r['seed']}: recall={r['recall']:.2f} precision={r['precision']:.2f} "
        f"f1={r['f1']:.2f} heavy={r['heavy']} reported={r['reported']} "
        f"s/1e6={r['encode_s_per_million'] + r['estimate_s_per_million']:.1f}"
    )


def summary_table(paths: list[str]) -> list[str]:
    """Markdown rows: per method and point, the means over seeds, with our model's recall (ours only)."""
    groups: dict[tuple, list[dict]] = {}
    setups: dict[tuple, dict] = {}
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        for r in data["records"]:
            key = (r["n"], r["zipf"], r["bytes"], r["epsilon"], r["library"], r["method"])
            groups.setdefault(key, []).append(r)
            setups[key] = data["setup"]
    head = "method n Zipf B eps seeds heavy reported recall model precision F1 coverage".split()
    cols = [*head, "encode s/1e6", "estimate s/1e6", "CPU s/1e6"]
    out = ["| " + " | ".join(cols) + " |", "| --- |" + " ---: |" * (len(cols) - 1)]
    for key in sorted(groups):
        n, zipf, nbytes, eps, lib, method = key
        ok = [r for r in groups[key] if r.get("status", "ok") == "ok"]
        name = f"{lib} {method}" + (f" ({ok[0]['oracle']})" if ok and ok[0].get("oracle") else "")
        if not ok:
            out.append(f"| {name} | {n:,} | {zipf:g} | {nbytes} | {eps:g} | - | {groups[key][0]['status']} |"
                       + " |" * 9)
            continue

        def mean(k: str, rows: list[dict] = ok) -> float:
            return float(np.mean([r[k] for r in rows]))

        model, cov, cpu = "-", "-", "-"
        if all("estimate_cpu_s_per_million" in r for r in ok):
            cpu = f"{mean('encode_cpu_s_per_million') + mean('estimate_cpu_s_per_million'):.1f}"
        if lib == "ldp-beam":
            st = setups[key]
            model = f"{model_recall(eps, n, nbytes, zipf, st['strings'], st['heavy'], mean('reported')):.2f}"
            cov = f"{mean('coverage'):.2f}"
        out.append(
            f"| {name} | {n:,} | {zipf:g} | {nbytes} | {eps:g} | {len(ok)} | {mean('heavy'):.0f} | "
            f"{mean('reported'):.0f} | {mean('recall'):.2f} | {model} | {mean('precision'):.2f} | "
            f"{mean('f1'):.2f} | {cov} | {mean('encode_s_per_million'):.1f} | "
            f"{mean('estimate_s_per_million'):.1f} | {cpu} |"
        )
    return out


def plot(result: dict[str, Any], path: str | Path) -> None:
    """Left: our recall against epsilon per (n, Zipf, B). Right: F1 of every method at the peers' n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in result["records"] if r.get("status", "ok") == "ok"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12.5, 5))
    ours = [r for r in recs if r["library"] == "ldp-beam" and r["truth"] == "population"]
    shapes = sorted({(r["zipf"], r["bytes"]) for r in ours})  # a colour per (Zipf, B), a line style per n
    styles = dict(zip(sorted({r["n"] for r in ours}), (":", "-", "--", "-.")))
    for key in sorted({(r["n"], r["zipf"], r["bytes"]) for r in ours}):
        rows = [r for r in ours if (r["n"], r["zipf"], r["bytes"]) == key]
        eps = sorted({r["epsilon"] for r in rows})
        mean = [np.mean([r["recall"] for r in rows if r["epsilon"] == e]) for e in eps]
        label = f"n={key[0]:.0e}, Zipf {key[1]:g}, B={key[2]}"
        colour = plt.cm.tab10(shapes.index(key[1:]) % 10)
        ax.plot(eps, mean, marker="o", linestyle=styles.get(key[0], "-"), color=colour, label=label)
    ax.axhline(0.9, color="grey", linestyle=":", label="issue's 0.9")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("recall of strings >= 0.2% (mean over seeds)")
    ax.set_title("ldp-beam PEM (sketch search + verification), top_k 64")
    peers = [r for r in recs if r["truth"] == "subsample"]
    for lib, method in sorted({(r["library"], r["method"]) for r in peers}):
        rows = [r for r in peers if (r["library"], r["method"]) == (lib, method)]
        eps = sorted({r["epsilon"] for r in rows})
        mean = [np.mean([r["f1"] for r in rows if r["epsilon"] == e]) for e in eps]
        ax2.plot(eps, mean, "-o", label=f"{lib} {method}")
    ax2.set_xlabel("epsilon")
    ax2.set_ylabel("F1 (mean over Zipf, B, seeds)")
    ax2.set_title(f"same subsample, n = {result['setup']['peer_n']:,}")
    for a in (ax, ax2):
        a.set_ylim(-0.02, 1.02)
        a.grid(True, alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _floats(text: str, what: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(not x > 0 for x in out):
        raise SystemExit(_usage(f"{what} must be comma-separated positive numbers, got {text!r}"))
    return out


def _usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="output JSON (rewritten after every grid point)")
    ap.add_argument("--plot", help="output PNG")
    ap.add_argument("--epsilons", default="2,4,8")
    ap.add_argument("--ns", default="100000,1000000", help="n of our runs (comma-separated)")
    ap.add_argument("--zipfs", default="1.1,1.5", help="Zipf exponents")
    ap.add_argument("--lengths", default="4,6", help="string lengths B in bytes")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per point")
    ap.add_argument("--first_seed", type=int, default=0, help="the seeds are first_seed, first_seed + 1, ...")
    ap.add_argument("--strings", type=int, default=100_000, help="distinct random strings of the population")
    ap.add_argument("--top_k", type=int, default=64)
    ap.add_argument("--heavy", type=float, default=0.002, help="recall counts strings at or above this")
    ap.add_argument("--useful", type=float, default=0.001, help="precision counts strings at or above this")
    ap.add_argument("--peers", action="store_true", help="also run pure-ldp in .cache/peers-venv")
    ap.add_argument("--peer_n", type=int, default=20_000, help="users of the peers' subsample")
    ap.add_argument("--peer_methods", default=",".join(PEER_METHODS))
    ap.add_argument("--peer_sketch", default="16,1024", help="HCMS hash functions k and width m")
    ap.add_argument("--peer_oracle", choices=("hcms", "olh"), default="hcms",
                    help="the peers' frequency oracle: HCMS, or pure-ldp's default OLH (whole domain)")
    ap.add_argument("--peer_fragment_bits", type=int, default=8, help="bits added per peer level")
    ap.add_argument("--peer_timeout", type=float, default=120.0, help="seconds before a peer run is killed")
    args, extra = ap.parse_known_args(argv)
    if extra:
        raise SystemExit(_usage(f"unknown arguments {' '.join(extra)}"))
    args.epsilons = _floats(args.epsilons, "--epsilons")
    args.ns = [int(x) for x in _floats(args.ns, "--ns")]
    args.zipfs = _floats(args.zipfs, "--zipfs")
    args.lengths = [int(x) for x in _floats(args.lengths, "--lengths")]
    args.peer_methods = [m for m in args.peer_methods.split(",") if m]
    bad = [m for m in args.peer_methods if m not in PEER_METHODS]
    if bad or args.seeds < 1 or args.peer_n < 100 or min(args.ns) < 100 or args.strings < 1:
        raise SystemExit(_usage(
            f"need --peer_methods among {','.join(PEER_METHODS)}, --seeds >= 1, --peer_n and --ns >= 100"
        ))
    return args


def _git_head() -> str | None:
    """The checkout's commit (the code measured, up to uncommitted edits), or None outside git."""
    try:
        cmd = ["git", "rev-parse", "HEAD"]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError:
        return None
    return out.stdout.strip() or None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    t0 = time.perf_counter()
    setup = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
    words = argv if argv is not None else sys.argv[1:]
    setup["command"] = "python -m experiments.heavy_hitters " + " ".join(words)
    setup["commit"] = _git_head()
    result: dict[str, Any] = {"setup": setup, "records": [], "complete": False}
    result["load_avg_start"] = os.getloadavg()[0]
    for n in sorted(args.ns):
        for eps in args.epsilons:
            for zipf in args.zipfs:
                for nbytes in args.lengths:
                    for seed in range(args.first_seed, args.first_seed + args.seeds):
                        for row in _point(args, eps, n, zipf, nbytes, seed):
                            print(_fmt(row), file=sys.stderr, flush=True)
                            result["records"].append(row)
                        result["seconds"] = time.perf_counter() - t0
                        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    result["complete"] = True
    result["load_avg_end"] = os.getloadavg()[0]
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.plot:
        plot(result, args.plot)
    return result


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--peer-run":
        sys.exit(peer_run(sys.argv[2]))
    if len(sys.argv) > 2 and sys.argv[1] == "--summarize":
        print("\n".join(summary_table(sys.argv[2:])))
        sys.exit(0)
    if len(sys.argv) > 3 and sys.argv[1] == "--replot":
        runs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in sys.argv[3:]]
        peer_n = [r["setup"]["peer_n"] for r in runs if r["setup"].get("peers")]
        records = [x for r in runs for x in r["records"]]
        merged = {"setup": {"peer_n": peer_n[0] if peer_n else 0}, "records": records}
        plot(merged, sys.argv[2])
        sys.exit(0)
    main()
