"""Kill runs: every row of the issue "Crash-proof jobs", many randomised runs each.

    python benchmarks/kill_runs.py                    # 20 runs per row
    python benchmarks/kill_runs.py --runs 10 --json kill_runs.json
    python benchmarks/kill_runs.py --rows abort,replace-abort --seed 1234 --runs 1 -v
    python benchmarks/kill_runs.py --rows commit,abort --runs 2 --sweep 1:60   # every request

Each run (``tests/helpers/kill_harness.py``): a job in a child process writes
deterministic files to a fresh bucket (or local directory), is SIGKILLed at one of the
row's phase's S3 requests drawn by the seed (after a random delay where the phase sends
none; a kill that lands after the phase fails the run), or runs to its end under
injected faults, and a fresh
process recovers it (``commit_job()``, ``commit_job(messages)``, ``abort_job()``,
``cleanup_job()``); the checker then compares the destination's files and bytes,
``_SUCCESS``, pending uploads and what is left of the job with what the issue requires.
Seeds are printed: ``--rows ROW --seed SEED --runs 1`` replays one run (at the same
request; a delay-killed run lands near the same point). ``--sweep A:B``
kills instead at the A-th, A+1-th ... B-th S3 request of the row's phase, one run each
(the job waits at the phase until the kill is armed: exact, repeatable kill points).

Starts its own moto S3 server on 127.0.0.1; each S3 run talks to it through a fault
front (which counts and holds the requests). Prints the issue's table, then where the kills
landed and how the jobs ended; ``--json PATH`` (``-`` for stdout) writes every run.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from helpers.kill_harness import ROWS, KillHarness, RunResult  # noqa: E402

from magicfs.integrations.embedded_s3 import EmbeddedS3Server  # noqa: E402


def table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]


def what_was_wrong(results: list[RunResult]) -> str:
    problems = collections.Counter()
    for result in results:
        for problem in result.problems:
            problems[_generic(problem)] += 1
    if not problems:
        return ""
    return "; ".join(f"{n}x {p}" for p, n in problems.most_common())


def _generic(problem: str) -> str:
    """A problem without the run's names and numbers, so equal problems add up."""
    words = []
    for word in problem.split():
        if "kill-" in word or "://" in word or "/tmp/" in word:
            word = "<name>"
        words.append(word)
    text = " ".join(words)
    return text if len(text) <= 160 else text[:157] + "..."


def summary(results: list[RunResult]) -> list[str]:
    by_row: dict[str, list[RunResult]] = collections.defaultdict(list)
    for result in results:
        by_row[result.row].append(result)
    main_rows, detail_rows = [], []
    for key, row in ROWS.items():
        runs = by_row.get(key)
        if not runs:
            continue
        clean = sum(r.clean for r in runs)
        main_rows.append([row.title, f"{clean} / {len(runs)}", what_was_wrong(runs)])
        landed = collections.Counter(_landing(r) for r in runs)
        outcomes = collections.Counter(r.outcome for r in runs)
        committers = collections.Counter(r.committer for r in runs)
        detail_rows.append(
            [
                key,
                ", ".join(f"{k} {n}" for k, n in sorted(committers.items())),
                ", ".join(f"{k}: {n}" for k, n in landed.most_common()),
                ", ".join(f"{k}: {n}" for k, n in outcomes.most_common()),
            ]
        )
    return [
        *table(
            main_rows,
            ["crash, then recovery", "clean runs / total", "what was wrong in the others"],
        ),
        "",
        *table(detail_rows, ["row", "committers", "where the kills landed", "outcomes"]),
    ]


def _landing(result: RunResult) -> str:
    """The phase a kill hit and, inside job commit, how far the commit had got."""
    if result.phase != "job_commit":
        return result.phase
    detail = result.detail
    if "journal committed" in detail or "_SUCCESS" in detail:
        return "job_commit (clean-up)"
    if "journal deleting" in detail:
        return "job_commit (deleting old)"
    if "journal publishing" in detail:
        return "job_commit (publishing)"
    return "job_commit (before the journal)"


def report(result: RunResult, verbose: bool, log) -> None:
    print(f"{result.seconds:6.1f}s {result.line()}", file=log, flush=True)
    if verbose or not result.clean:
        for step in result.steps:
            print(f"         {json.dumps(step)[:400]}", file=log, flush=True)
    if not result.clean:
        print(f"         replay: {result.replay()}", file=log, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per row (default 20)")
    parser.add_argument("--rows", default="all", help=f"comma-separated: {', '.join(ROWS)}")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    parser.add_argument("--json", metavar="PATH", help="write every run as JSON ('-': stdout)")
    parser.add_argument("--keep", action="store_true", help="keep every run's bucket and files")
    parser.add_argument(
        "--sweep",
        metavar="A:B",
        help="kill at each of requests A..B of the phase (S3 kill rows), for every seed",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print each recovery call")
    args = parser.parse_args()
    rows = list(ROWS) if args.rows == "all" else args.rows.split(",")
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; rows: {', '.join(ROWS)}")
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    requests: list[int | None] = [None]
    if args.sweep:
        low, _, high = args.sweep.partition(":")
        requests = list(range(int(low), int(high or low) + 1))
    log = sys.stderr if args.json == "-" else sys.stdout
    print(f"seeds {first}..{first + args.runs - 1} for each row", file=log, flush=True)
    results: list[RunResult] = []
    start = time.monotonic()
    with EmbeddedS3Server() as server:
        harness = KillHarness(server.endpoint_url, keep=args.keep)
        for key in rows:
            for seed in range(first, first + args.runs):
                for request in requests if ROWS[key].killed else [None]:
                    result = harness.run(ROWS[key], seed, request)
                    results.append(result)
                    report(result, args.verbose, log)
        calibrations = harness.calibration_results
        if not args.keep and all(r.clean for r in results + calibrations):
            shutil.rmtree(harness.workdir, ignore_errors=True)
        elif not all(r.clean for r in results):
            print(f"runs that were not clean kept their data under {harness.workdir}", file=log)
    print(file=log)
    lines = summary(results)
    for calibration in calibrations:
        if not calibration.clean:
            lines.append(f"calibration run (unkilled) NOT clean: {calibration.line()}")
    lines.append(
        f"\n{len(results)} runs ({args.runs} per row, seeds from {first}) in "
        f"{time.monotonic() - start:.0f} s; {len(calibrations)} unkilled calibration runs, "
        f"{sum(c.clean for c in calibrations)} clean"
    )
    print("\n".join(lines), file=log)
    if args.json:
        document = {
            "first_seed": first,
            "runs_per_row": args.runs,
            "runs": [dataclasses.asdict(r) | {"clean": r.clean} for r in results],
            "calibrations": [dataclasses.asdict(r) | {"clean": r.clean} for r in calibrations],
        }
        text = json.dumps(document, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as out:
                out.write(text + "\n")


if __name__ == "__main__":
    main()
