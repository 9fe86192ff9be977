#!/usr/bin/env python3
"""Writes testdata/sim/philly_vc/philly_w{1,2,3}.csv from a checkout of abdullahfsm/PCS.

PCS (OSDI '24) publishes Microsoft's Philly trace (msr-fiddle/philly-traces, CC BY 4.0) as one
file per virtual cluster (VC), simulation/traces/trace_<vc>.csv:
    app_id,submit_time,service,num_jobs,sleep_time,model_name
where submit_time is seconds from that VC's own first job, num_jobs is the job's GPUs and
service = run time x speedup(model_name, GPUs), the speedup taken from PCS's
simulation/models.py (model_name is PCS's assignment, not Philly's). This script recovers
    run_s = service / speedup   (an integer number of seconds for every row; checked)
puts the VCs on one clock by aligning their last submissions (see the README beside the output
for why), cuts three windows of 7 days of warm-up + 4 measured days and writes the demand
sizing of the VCs (philly_vc_demand_nodes.csv).

It imports models.py from the PCS checkout (nothing of PCS is copied here); models.py imports
numpy, which need not be installed: a stand-in module is put in its place.

Usage: scripts/philly-vc-subset.py PCS_CHECKOUT [OUT_DIR]
"""
import csv
import glob
import importlib.util
import inspect
import math
import os
import sys
import types

DAY = 86400
# (file, first measured day on the aligned clock); each file starts 7 days earlier.
WINDOWS = (("w1", 50), ("w2", 64), ("w3", 78))
WARMUP_DAYS, MEASURED_DAYS = 7, 4
# The demand sizing: mean GPU demand over these days of the aligned clock / LOAD, in 8-GPU nodes.
DENSE_DAYS, LOAD = (43, 95), 0.9


def load_models(pcs):
    sys.modules.setdefault("numpy", types.ModuleType("numpy"))  # models.py only imports it
    spec = importlib.util.spec_from_file_location("pcs_models", os.path.join(pcs, "simulation", "models.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {n: c() for n, c in inspect.getmembers(mod, inspect.isclass)
            if issubclass(c, mod.Model) and c is not mod.Model}


def read_vc(path, models):
    jobs = []
    with open(path) as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            gpus = int(row["num_jobs"])
            service = float(row["service"])
            speedup = models[row["model_name"]].speedup(gpus) if gpus > 1 else 1.0
            run = service / speedup
            submit = float(row["submit_time"])
            if abs(run - round(run)) > 1e-3 or abs(submit - round(submit)) > 1e-6 or gpus < 1:
                sys.exit(f"{path}:{line}: run time {run} or submit {submit} not whole seconds, or GPUs {gpus} < 1")
            jobs.append((int(round(submit)), gpus, int(round(run))))
    return jobs


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    pcs = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(os.path.dirname(__file__), "..", "testdata", "sim",
                                                              "philly_vc")
    models = load_models(pcs)
    per_vc = {}
    for path in sorted(glob.glob(os.path.join(pcs, "simulation", "traces", "trace_*.csv"))):
        per_vc[os.path.basename(path)[len("trace_"):-len(".csv")]] = read_vc(path, models)
    if not per_vc:
        sys.exit(f"{pcs}: no simulation/traces/trace_*.csv")
    end = max(jobs[-1][0] for jobs in per_vc.values())
    aligned = sorted((t - jobs[-1][0] + end, vc, g, r) for vc, jobs in per_vc.items() for t, g, r in jobs)
    os.makedirs(out, exist_ok=True)
    for name, day in WINDOWS:
        a, b = (day - WARMUP_DAYS) * DAY, (day + MEASURED_DAYS) * DAY
        sel = [j for j in aligned if a <= j[0] < b]
        with open(os.path.join(out, f"philly_{name}.csv"), "w") as f:
            f.write(f"# Philly (Microsoft, ATC 19) jobs of 12 VCs, days {day - WARMUP_DAYS}-{day + MEASURED_DAYS} of the "
                    "per-VC traces aligned at their last submit;\n")
            f.write(f"# the first {WARMUP_DAYS} days after the first submit are warm-up (--warmup-s "
                    f"{WARMUP_DAYS * DAY}). Provenance and derivation: README.md beside this file.\n")
            f.write("submit_s,tenant,gpus,run_s,est_s\n")
            for t, vc, g, r in sel:
                f.write(f"{t - sel[0][0]},{vc},{g},{r},\n")
        print(f"{name}: {len(sel)} jobs")
    # VCs in the order of philly_vc_nodes.csv (the Helios sizes), others after; a VC with under
    # half a GPU of demand (51b7ef) gets no slice.
    order = []
    helios = os.path.join(out, "philly_vc_nodes.csv")
    if os.path.exists(helios):
        with open(helios) as f:
            order = [row["tenant"] for row in csv.DictReader(f)]
    order += sorted(vc for vc in per_vc if vc not in order)
    a, b = DENSE_DAYS[0] * DAY, DENSE_DAYS[1] * DAY
    with open(os.path.join(out, "philly_vc_demand_nodes.csv"), "w") as f:
        f.write("tenant,nodes\n")
        for vc in order:
            demand = sum(g * r for t, v, g, r in aligned if v == vc and a <= t < b) / (b - a)
            if demand >= 0.5:
                f.write(f"{vc},{max(1, math.ceil(demand / (LOAD * 8)))}\n")


if __name__ == "__main__":
    main()
