"""Runs the peer libraries on the values in a .npy file; prints JSON records on stdout.

Executed by ``bench.oracles --peers`` inside ``.cache/peers-venv`` (it must not import our packages).
Usage: python bench/_peer_runner.py VALUES.npy D EPSILON
"""

import json
import sys
import time

import numpy as np


def _rec(library, mechanism, n, d, eps, t_enc, t_agg, est):
    return {
        "library": library,
        "mechanism": mechanism,
        "n": n,
        "d": d,
        "epsilon": eps,
        "encode_reports_per_s": n / t_enc,
        "aggregate_reports_per_s": n / t_agg,
        "estimate": [float(x) for x in est],
    }


def pure_ldp(values, d, eps):
    from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer
    from pure_ldp.frequency_oracles.local_hashing import LHClient, LHServer

    out = []
    n = len(values)
    items = [int(v) + 1 for v in values]  # pure-ldp's default index mapper is 1-based
    for mech, client, server in (
        ("grr", DEClient(eps, d), DEServer(eps, d)),
        ("olh", LHClient(eps, d, use_olh=True), LHServer(eps, d, use_olh=True)),
    ):
        t0 = time.perf_counter()
        reports = [client.privatise(v) for v in items]
        t1 = time.perf_counter()
        for r in reports:
            server.aggregate(r)
        est = np.asarray(server.estimate_all(range(1, d + 1), suppress_warnings=True)) / n
        t2 = time.perf_counter()
        out.append(_rec("pure-ldp 1.2.0", mech, n, d, eps, t1 - t0, t2 - t1, est))
    return out


def multi_freq_ldpy(values, d, eps):
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI, GRR_Client
    from multi_freq_ldpy.pure_frequency_oracles.LH import LH_Aggregator_MI, LH_Client

    out = []
    n = len(values)
    vals = [int(v) for v in values]
    t0 = time.perf_counter()
    reps = [GRR_Client(v, d, eps) for v in vals]
    t1 = time.perf_counter()
    est = GRR_Aggregator_MI(reps, d, eps)
    t2 = time.perf_counter()
    out.append(_rec("multi-freq-ldpy 0.2.5", "grr", n, d, eps, t1 - t0, t2 - t1, est))
    t0 = time.perf_counter()
    reps = [LH_Client(v, d, eps, optimal=True) for v in vals]
    t1 = time.perf_counter()
    est = LH_Aggregator_MI(reps, d, eps, optimal=True)
    t2 = time.perf_counter()
    out.append(_rec("multi-freq-ldpy 0.2.5", "olh", n, d, eps, t1 - t0, t2 - t1, est))
    return out


def main():
    values = np.load(sys.argv[1])
    d, eps = int(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(pure_ldp(values, d, eps) + multi_freq_ldpy(values, d, eps)))


if __name__ == "__main__":
    main()
