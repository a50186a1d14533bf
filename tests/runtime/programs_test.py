#!/usr/bin/env python3
"""tsp-sim --programs DIR simulates the programs and the plan an --emit-programs run wrote: nothing is
profiled, searched or compiled (no search phase, no compiled segments), and the run gives what the
writing run gave (its --json summary and its trace, on 1 and 2 MPI ranks). A plan the config asks for
must be the programs' plan; each way a program directory's plan can be wrong is its own error.

Usage: programs_test.py TSP_SIM CONFIG [CONFIG...]"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rank_independence_test import differences as trace_differences  # noqa: E402  h5diff but /meta's run attributes

# What measures the machine or names the run's files, not the simulated cluster.
MASKED = {"phase_seconds", "wall_seconds", "peak_rss_bytes_max_rank", "peak_rss_bytes_all_ranks", "trace",
          "event_buffer_peak_rows"}
# What the writing run has and --programs cannot: how its programs were compiled and the training
# schedule's figures (the scheduler's), and the searched plans it skipped.
WRITER_ONLY = {"compile", "training", "skipped_plans"}
# How the chips were dealt to ranks and the windows between them: the rest is the same at any rank count.
RANK_DEPENDENT = {"ranks", "cut_links", "window_cycles", "windows"}


def fail(message):
    sys.exit(f"FAIL: {message}")


def run(cmd, expect=0):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if result.returncode != expect:
        fail(f"{' '.join(cmd)} exited {result.returncode}, expected {expect}\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result


def check_same_run(exe, config, tmp):
    name = os.path.splitext(os.path.basename(config))[0]
    programs = os.path.join(tmp, name + "-programs")
    written = os.path.join(tmp, name + "-written.h5")
    writer = json.loads(run([exe, "--config", config, "--emit-programs", programs, "--json", "--quiet", "--out",
                             written]).stdout)
    # The writing run searched (or planned) and compiled: what the --programs run must not do.
    if "search" not in writer["phase_seconds"] or writer["compile"]["segments"]["compiled"] < 1:
        fail(f"{name}: the writing run shows no search phase or no compiled segment: {writer['phase_seconds']}")
    if not os.path.isfile(os.path.join(programs, "plan.yaml")):
        fail(f"{name}: --emit-programs wrote no plan.yaml")
    for ranks in (1, 2):
        out = os.path.join(tmp, f"{name}-programs-np{ranks}.h5")
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", exe, "--config", config, "--programs", programs,
               "--json", "--quiet", "--out", out]
        rerun = json.loads(run(cmd).stdout)
        if "search" in rerun["phase_seconds"]:
            fail(f"{name} on {ranks} ranks: --programs ran the plan stage: {rerun['phase_seconds']}")
        if "compile" in rerun:
            fail(f"{name} on {ranks} ranks: --programs compiled segments: {rerun['compile']}")
        for key in sorted(set(writer) | set(rerun)):
            if key in MASKED or key in WRITER_ONLY or key in RANK_DEPENDENT:
                continue
            if writer.get(key) != rerun.get(key):
                fail(f"{name} on {ranks} ranks: '{key}' differs: written {str(writer.get(key))[:300]}, "
                     f"--programs {str(rerun.get(key))[:300]}")
        if bad := trace_differences(written, out):
            fail(f"{name} on {ranks} ranks: the trace differs from the writing run's:\n" + "\n".join(bad[:20]))
    print(f"ok: {name}: --programs gives the writing run's summary and trace on 1 and 2 ranks, without search or compile")
    return programs


def expect_error(exe, cmd, pattern, out):
    result = run(cmd + ["--quiet", "--out", out], expect=1)
    if not re.search(pattern, result.stderr):
        fail(f"{' '.join(cmd)}: stderr does not match {pattern!r}:\n{result.stderr}")
    leftovers = [p for p in (out, out.replace(".h5", ".partial.h5")) if os.path.exists(p)]
    if leftovers:
        fail(f"{' '.join(cmd)}: left {leftovers} behind")


def check_plan_errors(exe, config, programs, tmp):
    """Each way the plan of a program directory can be wrong, on the quickstart's 4-stage pipeline."""
    with open(os.path.join(programs, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(programs, "plan.yaml")) as f:
        plan_yaml = f.read()
    out = os.path.join(tmp, "error.h5")
    count = 0

    def with_manifest(name, change, pattern, args=(), files=None):
        nonlocal count
        directory = os.path.join(tmp, "bad-" + name)
        os.makedirs(directory)
        for entry in os.listdir(programs):
            if entry not in ("manifest.json", "plan.yaml"):
                os.symlink(os.path.join(programs, entry), os.path.join(directory, entry))
        m = json.loads(json.dumps(manifest))
        change(m)
        with open(os.path.join(directory, "manifest.json"), "w") as f:
            json.dump(m, f)
        for file, text in (files or {"plan.yaml": plan_yaml}).items():
            with open(os.path.join(directory, file), "w") as f:
                f.write(text)
        expect_error(exe, [exe, "--config", config, "--programs", directory, *args],
                     pattern.replace("{dir}", re.escape(directory)), out)
        count += 1

    with_manifest("no_plan", lambda m: m.pop("plan"),
                  "{dir}/manifest.json: it does not record the plan its programs were compiled for; compile them "
                  "for this run with --emit-programs")
    with_manifest("plan_file_number", lambda m: m["plan"].update(file=3),
                  "{dir}/manifest.json: plan.file must name the plan file")
    with_manifest("plan_file_gone", lambda m: m["plan"].update(file="gone.yaml"),
                  "{dir}/gone.yaml: cannot open the plan file")
    with_manifest("prediction_text", lambda m: m["plan"].update(predicted_iteration_cycles="fast"),
                  "{dir}/manifest.json: plan.predicted_iteration_cycles must be a number of cycles")
    with_manifest("placement_list", lambda m: m["plan"].update(placement=[1, 2]),
                  "{dir}/manifest.json: plan.placement is not a placement report")
    with_manifest("plan_beyond_cluster", lambda m: None,
                  r"{dir}/plan.yaml:\d+:\d+: plan stage 3: chip 9 is not in the cluster \(chips 0 to 3\)",
                  files={"plan.yaml": plan_yaml.replace("chip: 3,", "chip: 9,")})

    # The plan the run asks for against the programs' plan.
    other_pipeline = os.path.join(tmp, "pp2.yaml")
    with open(other_pipeline, "w") as f:
        f.write("dp: 1\ntp: 1\npp: 2\nstages:\n  - {first_layer: 0, chip: 0}\n  - {first_layer: 2, chip: 1}\n")
    expect_error(exe, [exe, "--config", config, "--programs", programs, "--plan", other_pipeline],
                 re.escape(other_pipeline) + r": the programs in .* were compiled for plan dp1-tp1-pp4-m1-v1; this plan "
                 r"file has plan dp1-tp1-pp2-m1-v1", out)
    swapped = os.path.join(tmp, "swapped.yaml")
    with open(swapped, "w") as f:
        f.write(plan_yaml.replace("chip: 1,", "chip: 7,").replace("chip: 2,", "chip: 1,").replace("chip: 7,", "chip: 2,"))
    expect_error(exe, [exe, "--config", config, "--programs", programs, "--plan", swapped],
                 re.escape(swapped) + r": the programs in .* were compiled for stage 1 on chip 1; this plan file has "
                 r"stage 1 on chip 2", out)
    fixed = os.path.join(tmp, "fixed-pp2.yaml")
    with open(config) as f:
        text = f.read()
    with open(fixed, "w") as f:
        f.write(re.sub(r"plan: \{pp: 4\}", "plan: {pp: 2}", text))
    expect_error(exe, [exe, "--config", fixed, "--programs", programs],
                 re.escape(fixed) + r":\d+:\d+: the programs in .* were compiled for plan dp1-tp1-pp4-m1-v1; the "
                 r"config's fixed plan is dp1-tp1-pp2-m1-v1", out)
    # The same plan as a plan file, and plan auto, run.
    same = os.path.join(tmp, "same.yaml")
    with open(same, "w") as f:
        f.write(plan_yaml)
    for plan in (same, "auto"):
        run([exe, "--config", config, "--programs", programs, "--plan", plan, "--quiet", "--out", out])
    print(f"ok: {count + 3} plan errors of a program directory, and its plan given again or under plan auto")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exe, configs = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        written = [check_same_run(exe, config, tmp) for config in configs]
        check_plan_errors(exe, configs[0], written[0], tmp)


if __name__ == "__main__":
    main()
