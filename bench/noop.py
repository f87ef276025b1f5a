"""No-op and first-build cost of ascendpipe vs `dvc repro` vs embedded doit alone, in one run.

    python bench/noop.py [--stages 8 500] [--repeats 5] [--dvc bench/.peers/bin/dvc]
    python bench/noop.py --pipeline pipelines/reid.yaml --repeats 10 --stages   # a built pipeline only

A no-op is timed two ways: as a user runs it again (`build PIPELINE`, which replays the remembered
answer of the last no-op when nothing it read has changed: engine/noop_memo.py) and deciding every
stage anew (`build PIPELINE -j 1`: any flag decides). A memo is written only once every file it
vouches for is two seconds old (the stat cache's racy window), so the synthetic pipelines wait 2.1 s
after their first build, as any build run again a few seconds later would find them.
DVC's 500-stage first build takes minutes (one `dvc repro` process per stage's bookkeeping); with
`--dvc-commit` its outputs are made by the same shell commands and recorded with `dvc commit`, and
only its no-op is timed.

Each pipeline is a chain of 8 stages plus N-8 independent stages (a dependent chain plus a wide
fan, the shape a matrix pipeline has), every stage a trivial shell command writing one small file. We time whole processes (what a
user waits for), report medians and ratios, and check that cost grows linearly with stages.
Beside them, in the same run: a bare interpreter start (`python -c pass`, the floor of any Python
tool) and, with `--pipeline`, the no-op of pipelines already built in this checkout (issue 32's
target: reid.yaml's no-op <= 2x the bare start). ascendpipe's bytecode is compiled first, as an
install does (with PYTHONDONTWRITEBYTECODE set, every run would compile the sources again).
Set up the peer once: `bash bench/setup_peers.sh` (dvc in its own venv, never a project dependency).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def ascendpipe_yaml(n: int) -> str:
    lines = ["stages:"]
    for i in range(n):
        dep = f"data/s{i - 1}.txt" if 0 < i < 8 else "seed.txt"
        lines += [
            f"  s{i}:",
            "    kind: run",
            f"    cmd: cat {dep} > data/s{i}.txt && echo {i} >> data/s{i}.txt",
            f"    deps: [{dep}]",
            f"    outs: [data/s{i}.txt]",
        ]
    return "\n".join(lines) + "\n"


def dvc_command(i: int) -> str:
    dep = f"data/s{i - 1}.txt" if 0 < i < 8 else "seed.txt"
    return f"cat {dep} > data/s{i}.txt && echo {i} >> data/s{i}.txt"


def dvc_yaml(n: int) -> str:
    lines = ["stages:"]
    for i in range(n):
        dep = f"data/s{i - 1}.txt" if 0 < i < 8 else "seed.txt"
        lines += [
            f"  s{i}:",
            f"    cmd: mkdir -p data && {dvc_command(i)}",
            f"    deps: [{dep}]",
            f"    outs: [data/s{i}.txt]",
        ]
    return "\n".join(lines) + "\n"


def doit_dodo(n: int) -> str:
    return f'''
DOIT_CONFIG = {{"backend": "sqlite3", "dep_file": ".doit.sqlite3", "verbosity": 0}}
def task_s():
    for i in range({n}):
        dep = f"data/s{{i - 1}}.txt" if 0 < i < 8 else "seed.txt"
        yield {{"name": str(i), "actions": [f"mkdir -p data && cat {{dep}} > data/s{{i}}.txt && echo {{i}} >> data/s{{i}}.txt"],
               "file_dep": [dep], "targets": [f"data/s{{i}}.txt"]}}
'''


def timed(argv, cwd) -> float:
    t = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed in {cwd}: {proc.stderr[-2000:]}")
    return elapsed


def setup(kind: str, n: int, root: Path) -> Path:
    ws = root / f"{kind}-{n}"
    ws.mkdir(parents=True)
    (ws / "seed.txt").write_text("seed\n")
    if kind == "ascendpipe":
        (ws / ".ascendpipe").mkdir()
        (ws / "pipeline.yaml").write_text(ascendpipe_yaml(n))
    elif kind == "dvc":
        subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
        (ws / "dvc.yaml").write_text(dvc_yaml(n))
    else:
        (ws / "dodo.py").write_text(doit_dodo(n))
    return ws


def commands(kind: str, dvc: str, decide: bool = False):
    if kind == "ascendpipe":
        return [sys.executable, "-m", "ascendpipe", "build", "-q", "pipeline.yaml", *(["-j", "1"] if decide else [])]
    if kind == "dvc":
        return [dvc, "repro", "-q"]
    return [sys.executable, "-m", "doit", "-f", "dodo.py"]


def bare_and_pipelines(paths: list[str], repeats: int) -> float:
    """Median whole-process no-op of each built pipeline against a bare interpreter start, interleaved
    (one of each per round, so a change of the machine's load falls on both). Returns the bare median."""
    bare: list[float] = []
    noops: dict[tuple, list[float]] = {(p, how): [] for p in paths for how in ("replayed", "deciding")}
    root = HERE.parent
    for _ in range(repeats):
        bare.append(timed([sys.executable, "-c", "pass"], root))
        for p in paths:
            noops[(p, "replayed")].append(timed([sys.executable, "-m", "ascendpipe", "build", "-q", p], root))
            noops[(p, "deciding")].append(timed([sys.executable, "-m", "ascendpipe", "build", "-q", p, "-j", "1"], root))
    b = statistics.median(bare)
    print(f"{'python -c pass':>40}: median {b * 1000:7.1f} ms (min {min(bare) * 1000:.1f}) over {repeats} runs", flush=True)
    for (p, how), xs in noops.items():
        m = statistics.median(xs)
        target = " (target <= 2x)" if how == "replayed" else ""
        print(f"{'build ' + p + ' (no-op, ' + how + ')':>40}: median {m * 1000:7.1f} ms (min {min(xs) * 1000:.1f}) = "
              f"{m / b:.2f}x the bare interpreter start{target}", flush=True)
    return b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", type=int, nargs="*", default=[8, 500], help="synthetic pipelines' sizes (none: skip them)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dvc", default=str(HERE / ".peers" / "bin" / "dvc"))
    ap.add_argument("--dvc-commit", action="store_true",
                    help="make dvc's outputs with the stages' own commands and `dvc commit` them instead of its first build")
    ap.add_argument("--pipeline", nargs="+", default=[], metavar="YAML",
                    help="also time the no-op of these pipelines, already built in this checkout (e.g. pipelines/reid.yaml)")
    args = ap.parse_args()
    import compileall

    import ascendpipe

    compileall.compile_dir(str(Path(ascendpipe.__file__).parent), quiet=1)
    for p in args.pipeline:  # a no-op only: the pipeline must be built already
        proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "-q", "-n", p], cwd=HERE.parent,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{p} is not built (or not fresh): run `ascendpipe build {p}` first. {proc.stderr[-500:]}")
    bare = bare_and_pipelines(args.pipeline, args.repeats)
    have_dvc = Path(args.dvc).exists()
    if not have_dvc:
        print(f"dvc not found at {args.dvc}: run `bash bench/setup_peers.sh` for the peer figures", file=sys.stderr)
    kinds = ["ascendpipe", "doit"] + (["dvc"] if have_dvc else [])
    root = Path(tempfile.mkdtemp(prefix="ascendpipe-bench-noop-"))
    results: dict[tuple, dict] = {}
    try:
        for n in args.stages:
            for kind in kinds:
                ws = setup(kind, n, root)
                argv = commands(kind, args.dvc)
                if kind == "dvc":
                    subprocess.run([args.dvc, "init", "-q"], cwd=ws, check=True)
                if kind == "dvc" and args.dvc_commit:
                    first = float("nan")
                    script = "mkdir -p data\n" + "\n".join(dvc_command(i) for i in range(n)) + "\n"
                    subprocess.run(["sh", "-c", script], cwd=ws, check=True)
                    subprocess.run([args.dvc, "commit", "-f", "-q"], cwd=ws, check=True)
                else:
                    first = timed(argv, ws)
                time.sleep(2.1)  # past the racy window: the first no-op can remember its answer
                noops = [timed(argv, ws) for _ in range(args.repeats)]
                entry = {"first": first, "noop": statistics.median(noops), "noop_spread": (min(noops), max(noops))}
                extra = ""
                if kind == "ascendpipe":
                    deciding = [timed(commands(kind, args.dvc, decide=True), ws) for _ in range(args.repeats)]
                    entry["deciding"] = statistics.median(deciding)
                    extra = f"  deciding (-j 1) median {entry['deciding'] * 1000:8.1f} ms"
                results[(kind, n)] = entry
                shown = f"{first:8.2f}s" if first == first else "   (dvc commit)"
                print(f"{kind:>10} {n:>4} stages: first build {shown}  no-op median {statistics.median(noops) * 1000:8.1f} ms "
                      f"(min {min(noops) * 1000:.1f}, max {max(noops) * 1000:.1f}){extra}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    for n in args.stages:
        ap_ = results[("ascendpipe", n)]
        line = (f"{n:>4} stages: ascendpipe no-op {ap_['noop'] * 1000:.1f} ms ({ap_['noop'] / bare:.2f}x python -c pass); "
                f"doit floor {results[('doit', n)]['noop'] * 1000:.1f} ms")
        if have_dvc:
            dv = results[("dvc", n)]
            line += (f"; dvc {dv['noop'] * 1000:.1f} ms -> no-op {dv['noop'] / ap_['noop']:.1f}x faster than dvc "
                     f"(target >= 15x; deciding: {dv['noop'] / ap_['deciding']:.1f}x)")
            if dv["first"] == dv["first"]:  # not NaN: dvc built it
                line += f"; first build {ap_['first']:.2f}s vs dvc {dv['first']:.2f}s = {ap_['first'] / dv['first']:.3f} of dvc's"
        print(line)
    if len(args.stages) >= 2:
        lo, hi = min(args.stages), max(args.stages)
        a, b = results[("ascendpipe", lo)], results[("ascendpipe", hi)]
        per_stage_noop = (b["noop"] - a["noop"]) / (hi - lo)
        per_stage_first = (b["first"] - a["first"]) / (hi - lo)
        print(f"ascendpipe marginal cost per stage: no-op {per_stage_noop * 1000:.3f} ms, first build {per_stage_first * 1000:.1f} ms")


if __name__ == "__main__":
    main()
