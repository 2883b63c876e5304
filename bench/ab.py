"""A/B of two revisions: the same benchmarks, run alternately against each, in one session.

    python -m bench.ab REV_A REV_B [BENCH ...] [--rounds N] [--args "..."] [--json]

REV is anything `git rev-parse` names (a commit, a branch, HEAD~3) or `.` for the working
tree as it is now, uncommitted changes included. Each revision is written out whole into a
temporary directory (`git archive`; nothing in the repository changes). BENCH names a
`bench.<module>` (default: actors); each is run as `python -m bench.<module> --quick ARGS`
with its cwd and PYTHONPATH set to that revision's directory, so each run imports that
revision's `iris` (checked before the first round: `iris.__file__` must lie in it).

The instrument is the same for both: by default every revision runs the `bench/` of the
working tree (`--bench-from each`: each revision's own). Both run on this interpreter when
its packages satisfy the revision's pyproject.toml (dependencies and `--extras`); a
revision that needs others gets a venv of its own, made with uv and pinned to this one's
versions of every package they share.

Runs alternate A, B, A, B ... (`--rounds` pairs), so a neighbour's load on this shared
machine falls on both sides alike. Per figure (every number in a run's last-line JSON that
is not the same in every run) it prints the medians, B/A, each side's range and the p of a
rank test (bench/_abstats.py); "differs" means p < 0.05, that is, the difference is larger
than the run-to-run spread. With --json the last line is one JSON object of all of it. A run
that fails is reported and left out (exit status 1); with no good run on a side, it stops
with the failure (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/ab.py`: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._abstats import ALPHA, compare, min_p  # noqa: E402

_WORKTREE = "."
_VERIFY = ("import json, iris, bench; "
           "print(json.dumps([iris.__file__, bench.__file__]))")


class AbError(Exception):
    """A mistake in what was asked (bad revision, unknown benchmark) or a run that failed."""


@dataclass
class Revision:
    label: str            # "A" or "B"
    spec: str             # as given on the command line
    commit: str           # the commit it resolved to, or "worktree"
    root: Path            # the directory its files were written to
    python: str = sys.executable
    runs: dict[str, list[dict]] = field(default_factory=dict)  # bench -> figures per run
    failed: dict[str, list[str]] = field(default_factory=dict)  # bench -> why, per failed run


# ---------------------------------------------------------------- revisions


def _git(repo: Path, *args: str, check: bool = False, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], check=check, **kw)


def resolve(repo: Path, spec: str) -> str:
    """The commit `spec` names, or "worktree" for `.`."""
    if spec == _WORKTREE:
        return "worktree"
    out = _git(repo, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}",
               capture_output=True, text=True)
    if out.returncode != 0:
        raise AbError(f"{spec!r} names no commit in {repo}")
    return out.stdout.strip()


def write_out(repo: Path, commit: str, dest: Path) -> None:
    """The revision's tracked files into `dest` (the working tree's: tracked and new ones)."""
    dest.mkdir(parents=True)
    if commit == "worktree":
        listed = _git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                      capture_output=True, check=True)
        for name in filter(None, listed.stdout.decode().split("\0")):
            src = repo / name
            if src.is_file():  # a deleted file is still listed as cached
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
        return
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", commit],
                               stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait() != 0:
        raise AbError(f"git archive {commit} failed")


def _requirements(root: Path, extras: str) -> list[str]:
    """The revision's requirements: its dependencies and those of `extras` (comma list)."""
    path = root / "pyproject.toml"
    if not path.is_file():
        return []
    project = tomllib.loads(path.read_text()).get("project", {})
    wanted = [e for e in extras.split(",") if e]
    optional = project.get("optional-dependencies", {})
    return [*project.get("dependencies", []), *(r for e in wanted for r in optional.get(e, []))]


def unmet(root: Path, extras: str) -> list[str]:
    """Requirements of the revision that this interpreter's packages do not satisfy."""
    from importlib import metadata

    from packaging.requirements import Requirement

    missing = []
    for line in _requirements(root, extras):
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(line)
            continue
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            missing.append(line)
    return missing


def python_for(rev: Revision, tmp: Path, extras: str) -> str:
    """This interpreter when its packages satisfy the revision's requirements; otherwise a
    venv of the revision's own, made with uv and pinned to this interpreter's versions of
    every package they share (the revision's `iris` still comes from PYTHONPATH)."""
    missing = unmet(rev.root, extras)
    if not missing:
        return sys.executable
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise AbError(f"{rev.spec} needs {missing} and uv is not installed to make its venv")
    venv = tmp / f"venv-{rev.label}"
    _step(f"{rev.label}: this venv lacks {', '.join(missing)}; making {venv}")
    frozen = subprocess.run([uv, "pip", "freeze", "--python", sys.executable],
                            capture_output=True, text=True, check=True).stdout
    pins = tmp / f"pins-{rev.label}.txt"
    pins.write_text("".join(f"{line}\n" for line in frozen.splitlines()
                            if "==" in line and not line.startswith(("-e", "iris=="))))
    target = f"{rev.root}[{extras}]" if extras else str(rev.root)
    for cmd in ([uv, "venv", "-q", "--python", sys.executable, str(venv)],
                [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                 "--constraint", str(pins), target]):
        if subprocess.run(cmd, check=False).returncode != 0:
            raise AbError(f"{' '.join(cmd)} failed")
    return str(venv / "bin" / "python")


def prepare(repo: Path, label: str, spec: str, tmp: Path, bench_from: str,
            extras: str) -> Revision:
    rev = Revision(label, spec, resolve(repo, spec), tmp / label)
    write_out(repo, rev.commit, rev.root)
    if bench_from == "worktree":
        shutil.rmtree(rev.root / "bench", ignore_errors=True)
        shutil.copytree(repo / "bench", rev.root / "bench",
                        ignore=shutil.ignore_patterns("__pycache__"))
    rev.python = python_for(rev, tmp, extras)
    verify(rev)
    return rev


def _env(rev: Revision) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(rev.root), "IRIS_AB_REVISION": rev.label}


def verify(rev: Revision) -> None:
    """Check that this revision's interpreter, run as the benchmarks will be, imports the
    revision's own `iris` and `bench` (not an installed copy)."""
    out = subprocess.run([rev.python, "-c", _VERIFY], cwd=rev.root, env=_env(rev),
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise AbError(f"{rev.label} ({rev.spec}) cannot import iris: {out.stderr.strip()[-300:]}")
    for path in json.loads(out.stdout.strip().splitlines()[-1]):
        if not Path(path).resolve().is_relative_to(rev.root.resolve()):
            raise AbError(f"{rev.label} ({rev.spec}) imported {path}, not its own copy")


# ---------------------------------------------------------------- running


def bench_module(name: str) -> str:
    module = name.removeprefix("bench.")
    if not module.isidentifier():
        raise AbError(f"benchmark {name!r} is not a module name (e.g. actors, bench.fleet)")
    return module


def run_once(rev: Revision, module: str, args: list[str], timeout_s: float) -> dict:
    """One run of `bench.<module> --quick ARGS`: the numbers of its last-line JSON."""
    cmd = [rev.python, "-m", f"bench.{module}", "--quick", *args]
    proc = subprocess.Popen(cmd, cwd=rev.root, env=_env(rev), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        raise AbError(f"{rev.label}: bench.{module} ran past {timeout_s:.0f} s") from None
    except BaseException:  # ^C: the bench and its children end too
        _end_group(proc)
        raise
    lines = stdout.strip().splitlines()
    try:
        figures = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    except json.JSONDecodeError:
        figures = None
    if not isinstance(figures, dict):
        tail = (stderr.strip() or stdout.strip())[-600:]
        raise AbError(f"{rev.label} ({rev.spec}): bench.{module} exited {proc.returncode} "
                      f"without a JSON last line:\n{tail}")
    # A bench that caught its own failure still prints JSON (bench.fleet: "n10000_failed":
    # "why"); without this its run counted as good, with no figures, and the table was empty.
    said = {k: v for k, v in figures.items()
            if isinstance(v, str) and (k in ("failed", "error") or k.endswith("_failed"))}
    numbers = {k: float(v) for k, v in figures.items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    if said or not numbers:
        why = "; ".join(f"{k}: {v}" for k, v in said.items()) or "no numeric figure"
        raise AbError(f"{rev.label} ({rev.spec}): bench.{module} reported a failure: {why}")
    return numbers


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM the bench's process group (benches unwind and kill their children on it),
    then SIGKILL what is left after 30 s."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.communicate(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


def run_rounds(revs: list[Revision], modules: list[str], args: list[str], rounds: int,
               timeout_s: float) -> None:
    """A run that fails (a benchmark's own error on a loaded machine, a timeout) is counted
    and reported, and the rounds go on; a benchmark with no good run on a side ends it."""
    for r in range(rounds):
        for module in modules:
            for rev in revs:  # A then B, every round
                started = time.monotonic()
                try:
                    rev.runs.setdefault(module, []).append(run_once(rev, module, args, timeout_s))
                    outcome = f"{time.monotonic() - started:.1f} s"
                except AbError as exc:
                    rev.failed.setdefault(module, []).append(str(exc))
                    outcome = f"FAILED: {str(exc).splitlines()[-1][:120]}"
                _step(f"round {r + 1}/{rounds}: {rev.label} bench.{module} {outcome}")
    for module in modules:
        for rev in revs:
            if not rev.runs.get(module):
                raise AbError(rev.failed[module][0])


def results(a: Revision, b: Revision, module: str) -> dict:
    """Per figure found in every run of both: compare(); figures equal in all runs (settings
    echoed back, like `n` or `quick`) are left out."""
    runs = a.runs[module] + b.runs[module]  # the runs that succeeded
    keys = sorted(set.intersection(*(set(r) for r in runs)))
    out = {}
    for key in keys:
        values = [r[key] for r in runs]
        if len(set(values)) > 1:
            out[key] = compare([r[key] for r in a.runs[module]], [r[key] for r in b.runs[module]])
    return out


# ---------------------------------------------------------------- report


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def print_table(a: Revision, b: Revision, table: dict, rounds: int) -> None:
    print(f"A = {a.spec} ({a.commit[:12]}), B = {b.spec} ({b.commit[:12]}), {rounds} rounds "
          f"alternating A, B; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    if rounds < 4:
        print(f"(with {rounds} rounds the smallest possible p is {min_p(rounds):.2f}: "
              "no difference can show; use --rounds 5 or more)")
    head = (f"{'figure':30} {'median A':>11} {'median B':>11} {'B/A':>6} "
            f"{'range A':>19} {'range B':>19} {'p':>6}  verdict")
    for module, figures in table.items():
        print(f"\nbench.{module}")
        for rev in (a, b):
            if rev.failed.get(module):
                print(f"{rev.label}: {len(rev.failed[module])} run(s) failed, left out; the "
                      f"first: {rev.failed[module][0].splitlines()[-1][:200]}")
        print(head)
        for key, f in figures.items():
            ratio = f"{f['ratio']:.3f}" if f["ratio"] is not None else "-"
            verdict = "differs" if f["differs"] else "within spread"
            ra = f"{_fmt(min(f['a']))}-{_fmt(max(f['a']))}"
            rb = f"{_fmt(min(f['b']))}-{_fmt(max(f['b']))}"
            print(f"{key:30} {_fmt(f['median_a']):>11} {_fmt(f['median_b']):>11} {ratio:>6} "
                  f"{ra:>19} {rb:>19} {f['p']:6.3f}  {verdict}")


def _step(what: str) -> None:
    print(f"  ab: {what}", file=sys.stderr, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev_a", metavar="REV_A", help="the baseline (a commit, or . )")
    parser.add_argument("rev_b", metavar="REV_B", help="the candidate (a commit, or . )")
    parser.add_argument("benches", metavar="BENCH", nargs="*", default=["actors"],
                        help="bench modules to run (default: actors)")
    parser.add_argument("--rounds", type=int, default=5, help="A,B pairs per bench (5)")
    parser.add_argument("--args", default="", help="more arguments for every bench run")
    parser.add_argument("--bench-from", choices=("worktree", "each"), default="worktree",
                        help="whose bench/ runs: the working tree's (default) or each rev's")
    parser.add_argument("--extras", default="bench",
                        help="extras for a revision that needs a venv of its own (bench)")
    parser.add_argument("--repo", default=".", help="the git repository (default: here)")
    parser.add_argument("--timeout", type=float, default=900.0, help="s per bench run (900)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary checkouts")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


def run(args: argparse.Namespace) -> dict:
    top = _git(Path(args.repo), "rev-parse", "--show-toplevel", capture_output=True, text=True)
    if top.returncode != 0:
        raise AbError(f"{args.repo} is not in a git repository")
    repo = Path(top.stdout.strip())
    modules = [bench_module(b) for b in args.benches]
    tmp = Path(tempfile.mkdtemp(prefix="iris-ab-"))
    try:
        revs = [prepare(repo, label, spec, tmp, args.bench_from, args.extras)
                for label, spec in (("A", args.rev_a), ("B", args.rev_b))]
        for module in modules:
            if not all((rev.root / "bench" / f"{module}.py").is_file() for rev in revs):
                raise AbError(f"no bench/{module}.py in the revisions' bench/")
        run_rounds(revs, modules, shlex.split(args.args), args.rounds, args.timeout)
    finally:
        if args.keep:
            _step(f"checkouts kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    a, b = revs
    table = {m: results(a, b, m) for m in modules}
    print_table(a, b, table, args.rounds)
    return {"a": {"rev": a.spec, "commit": a.commit, "python": a.python, "failed": a.failed},
            "b": {"rev": b.spec, "commit": b.commit, "python": b.python, "failed": b.failed},
            "rounds": args.rounds, "alpha": ALPHA, "args": args.args,
            "bench_from": args.bench_from, "benches": table}


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    try:
        out = run(args)
    except AbError as exc:
        print(f"ab: {exc}", file=sys.stderr)
        sys.exit(2)
    if args.json:
        print(json.dumps(out))
    if out["a"]["failed"] or out["b"]["failed"]:
        sys.exit(1)  # figures printed, but some runs are missing from them


if __name__ == "__main__":
    main()
