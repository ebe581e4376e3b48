"""Matrix runs: every scenario of a folder x arms x seeds, resumable, one folder per run.

    ccswitch testbed matrix run DIR --arms static,dqn --seeds 3 --out RESULTS [--ray auto|ADDRESS]

Layout of RESULTS::

    RESULTS/matrix.json                       what was asked (scenario folder, arms, seeds, policy file)
    RESULTS/<scenario>/<arm>/seed-<s>/        the runner's run folder (summary.json with the metrics,
                                              samples.parquet, table.md, emulator/, daemon/ ...)
    RESULTS/<scenario>/<arm>/seed-<s>.log     the run's own output (progress, errors)
    RESULTS/failures.jsonl                    one line per failed attempt: run, error, log, time

A run is *finished* when its folder has a ``summary.json`` with metrics; a
finished run is never repeated, so the same command resumes after Ctrl-C, a
crash or the end of a session.  A failed or timed-out run leaves its partial
folder aside (``seed-<s>.failed-N``) and is tried again by the next invocation.

Each run is a child process (``python -m ccswitch.testbed.runs.matrix one``):
the per-run time bound kills it (SIGTERM, then SIGKILL) and the parent then
removes namespaces whose owner died, so a hung run costs its bound and no
leftovers.  Locally ``--jobs`` runs go at once (default 1: runs on the same
cores disturb each other's fairness; the namespaces and addresses of parallel
runs never collide, each topology has its own random namespace ID).  With
``--ray`` each run is a Ray task on a cluster node (``cluster.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..scenario.arms import arm_applies, arm_scenario, check_arms, guard_setting
from ..scenario.daemon_config import check_settings, effective_guard
from ..scenario.model import DaemonSettings
from ..scenario.space import is_space_file

DEFAULT_TIMEOUT_S = 240.0
"""Per-run bound: a 30-40 s scenario takes 45-75 s with set-up and teardown on 2 cores."""
KILL_GRACE_S = 20.0


class MatrixError(RuntimeError):
    """The matrix cannot start (bad folder, arms, options); one line with the fix."""


@dataclass(frozen=True)
class Task:
    """One run of the matrix: a scenario file in one arm with one seed."""

    scenario: str
    """The scenario's name (its results folder)."""
    file: Path
    arm: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.scenario}/{self.arm}/seed-{self.seed}"

    def run_dir(self, results: Path) -> Path:
        return results / self.scenario / self.arm / f"seed-{self.seed}"

    def log_path(self, results: Path) -> Path:
        return results / self.scenario / self.arm / f"seed-{self.seed}.log"


@dataclass
class Outcome:
    task: Task
    ok: bool
    wall_s: float
    error: str = ""


def _last_half_of(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "summary.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text()).get("metrics", {}).get("last_half")
    except ValueError:
        return None


def finished(run_dir: Path) -> bool:
    """A run folder whose summary.json carries the metrics (report_run done) and can be scored.

    A run whose flow monitor fell behind (run_metrics.monitor_check) is a harness
    fault, not a result: it is not finished, so a resume runs it again.
    """
    from ..reports.run_metrics import run_monitor

    lh = _last_half_of(run_dir)
    return lh is not None and bool(run_monitor(run_dir, lh)["scored"])


def unscored_reason(run_dir: Path) -> str:
    """Why a run that ended with its metrics is not finished ('' when it is, or has no metrics)."""
    from ..reports.run_metrics import run_monitor

    lh = _last_half_of(run_dir)
    if lh is None:
        return ""
    monitor = run_monitor(run_dir, lh)
    if monitor["scored"]:
        return ""
    return (f"the flow monitor fell behind (samples {monitor.get('max_gap_s')} s apart, limit "
            f"{monitor.get('limit_s')} s): not scored, the next invocation runs it again (fewer --jobs helps)")


def scenario_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise MatrixError(f"{folder}: no such folder (give a folder of scenario files, e.g. "
                          "testbed/scenarios/matrix/dev)")
    files = sorted(f for f in folder.glob("*.toml") if not is_space_file(f))  # the space drawn from may sit beside
    if not files:
        raise MatrixError(f"{folder}: no *.toml scenario file here (make some with "
                          "`ccswitch testbed matrix generate SPACE.toml --split dev --out DIR`)")
    return files


def plan(folder: Path, arms: Sequence[str], seeds: int, *, scenarios: Sequence[str] = ()) -> list[Task]:
    """Every (scenario, arm, seed), scenario-major; each file is validated first (one error line)."""
    from ..scenario import load_scenario

    arms = check_arms(arms)
    if seeds < 1:
        raise MatrixError(f"--seeds must be >= 1, got {seeds}")
    tasks = []
    for f in scenario_files(folder):
        sc = load_scenario(f)
        if scenarios and sc.name not in scenarios:
            continue
        for seed in range(1, seeds + 1):
            tasks += [Task(sc.name, f.resolve(), arm, seed) for arm in arms if arm_applies(sc, arm)]
    return tasks


# --------------------------------------------------------------- one run ---


def child_argv(task: Task, run_dir: Path, policy_file: Path | None, guard: Sequence[str] = ()) -> list[str]:
    argv = [sys.executable, "-m", "ccswitch.testbed.runs.matrix", "one", str(task.file), task.arm,
            str(task.seed), str(run_dir)]
    argv += [f"--guard={g}" for g in guard]
    return argv + (["--policy-file", str(policy_file)] if policy_file else [])


def run_one(file: Path, arm: str, seed: int, run_dir: Path, policy_file: Path | None = None,
            guard: Sequence[str] = ()) -> None:
    """The child: the arm's scenario with this seed, into *run_dir*, then its report."""
    from ccswitch.dataplane import install_signal_handlers

    from ..reports.run import report_run
    from ..scenario import load_scenario
    from .runner import run_once

    install_signal_handlers()
    sc = arm_scenario(load_scenario(file), arm, policy_file, [guard_setting(g) for g in guard])
    sc = replace(sc, seeds=(seed,), repetitions=1)
    run_once(sc, run_dir, seed=seed, label=f"{sc.name} {arm} seed {seed}", progress=True)
    report_run(run_dir, plots=True)


def set_aside(run_dir: Path) -> None:
    """A partial folder of an earlier attempt moves to ``NAME.failed-N``, kept for inspection."""
    if not run_dir.exists():
        return
    n = 1
    while run_dir.with_name(f"{run_dir.name}.failed-{n}").exists():
        n += 1
    run_dir.rename(run_dir.with_name(f"{run_dir.name}.failed-{n}"))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill(proc: subprocess.Popen[Any]) -> None:
    """Stop the run's whole process group, and wait until every member is gone.

    Waiting for the child alone is not enough: a grandchild (the helper that
    creates a namespace, an ``ip`` command) can outlive it by a moment and
    finish making a namespace after the leftover cleanup has looked."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + KILL_GRACE_S
    killed = False
    while _group_alive(proc.pid):  # bounded: an unreaped zombie keeps a group "alive" for ever
        if time.monotonic() > deadline:
            if killed:
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            killed, deadline = True, time.monotonic() + 5.0
        time.sleep(0.05)


def _last_error(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    for ln in reversed(lines):
        if "error" in ln.lower() or "Error" in ln:
            return ln[:300]
    return lines[-1][:300] if lines else "no output"


def execute(task: Task, results: Path, policy_file: Path | None, timeout_s: float,
            stop: threading.Event | None = None, guard: Sequence[str] = ()) -> Outcome:
    """Run *task* as a child process into its folder; never raises for a failed run."""
    run_dir = task.run_dir(results)
    log = task.log_path(results)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    set_aside(run_dir)
    t0 = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(child_argv(task, run_dir, policy_file, guard), stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        error = ""
        while True:
            try:
                rc = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if stop is not None and stop.is_set():
                    _kill(proc)
                    return Outcome(task, False, time.monotonic() - t0, "interrupted")
                if time.monotonic() - t0 > timeout_s:
                    _kill(proc)
                    rc, error = -1, f"timed out after {timeout_s:g} s (--timeout-s)"
                    break
    wall = time.monotonic() - t0
    _cleanup_namespaces()
    if rc == 0 and finished(run_dir):
        return Outcome(task, True, wall)
    why = unscored_reason(run_dir) if rc == 0 else ""
    if why:  # checked once: for an older run it reads the samples
        return Outcome(task, False, wall, why)
    return Outcome(task, False, wall, error or f"exit {rc}: {_last_error(log)}")


def _cleanup_namespaces() -> None:
    """Namespaces whose owner process died (a killed run); never those of live runs."""
    with contextlib.suppress(Exception):
        from .netns import cleanup_leftovers

        cleanup_leftovers()


# --------------------------------------------------------------- progress ---


class MatrixProgress:
    """A rich progress bar with ETA on a terminal, one line per finished run otherwise."""

    def __init__(self, total: int, done: int, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, done, enabled
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.finished_here = 0
        self._bar: Any = None
        if enabled and self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("matrix"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[last]}"), TimeRemainingColumn(), transient=False)
            self._bar.start()
            self._id = self._bar.add_task("runs", total=total, completed=done, last="")

    def eta_s(self) -> float | None:
        if self.finished_here == 0:
            return None
        per_run = (time.monotonic() - self.t0) / self.finished_here
        return per_run * (self.total - self.done)

    def update(self, o: Outcome, log: Path) -> None:
        self.done += 1
        self.finished_here += 1
        status = "ok" if o.ok else "FAILED"
        if self._bar is not None:
            self._bar.update(self._id, advance=1, last=f"{o.task.key} {status}")
            if not o.ok:
                self._bar.console.print(f"FAILED {o.task.key}: {o.error} (log: {log})")
            return
        if not self.enabled and o.ok:
            return
        eta = self.eta_s()
        eta_txt = f", ETA {int(eta // 3600)}:{int(eta % 3600 // 60):02d}:{int(eta % 60):02d}" if eta else ""
        line = f"matrix [{self.done}/{self.total}{eta_txt}] {o.task.key} {status} in {o.wall_s:.0f} s"
        if not o.ok:
            line += f": {o.error} (log: {log})"
        print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


# ------------------------------------------------------------------ driver ---

Runner = Callable[[Task], Outcome]


def _guard_defaults() -> dict[str, Any]:
    """The daemon's `[guard]` defaults (empty when its config module is not importable)."""
    try:
        from ccswitch.daemon.config import defaults
    except ImportError:
        return {}
    return dict(defaults().values["guard"])


def check_same_guard(results: Path, guard: Sequence[str], effective: dict[str, Any] | None) -> None:
    """A resumed folder keeps the guard its daemons ran with (MatrixError naming the difference).

    matrix.json records the effective `[guard]` table (defaults + --guard), so
    a changed default of the daemon cannot slip into half of a folder's runs
    (a key added since, at its default, is no change); folders written before
    it recorded only the --guard flags, compared as such.
    """
    previous = results / "matrix.json"
    if not previous.is_file():
        return
    try:
        before = json.loads(previous.read_text())
    except ValueError:
        return
    ran = before.get("guard_effective")
    if ran and effective is not None:
        # A key the daemon gained after the folder was written ran as if at its default (a new key's
        # default keeps the old behaviour: daemon/config.py), so it is the same guard there.
        defaults = _guard_defaults() if set(effective) - set(ran) else {}
        added = {k for k in set(effective) - set(ran) if k in defaults and effective[k] == defaults[k]}
        diff = sorted(k for k in (set(ran) | set(effective)) - added if ran.get(k) != effective.get(k))
        if diff:
            flags = " ".join(f"--guard {k}={ran[k]}" for k in diff if k in ran)
            raise MatrixError(f"{results} ran its daemons with guard {', '.join(f'{k}={ran.get(k)}' for k in diff)}; "
                              f"these settings give {', '.join(f'{k}={effective.get(k)}' for k in diff)}: "
                              f"resume with {flags} or use another --out")
        return
    flags_before = before.get("guard") or []
    if sorted(flags_before) != sorted(guard):
        raise MatrixError(f"{results} holds runs with --guard {' '.join(flags_before) or '(none)'}; "
                          f"resume with the same settings or use another --out")


def _policy_digest(policy_file: Path | None) -> str:
    """sha256 of the policy file the dqn arm runs (the shipped one without --policy-file): names
    the self-play captures made from these runs (datasets/from_matrix.py)."""
    from ccswitch.models.policy import DEFAULT_POLICY

    return hashlib.sha256((policy_file or DEFAULT_POLICY).read_bytes()).hexdigest()


def run_matrix(folder: Path, arms: Sequence[str], seeds: int, results: Path, *, jobs: int = 1,
               timeout_s: float = DEFAULT_TIMEOUT_S, policy_file: Path | None = None,
               scenarios: Sequence[str] = (), ray_address: str | None = None, runs_per_node: int | None = None,
               progress: bool = True, guard: Sequence[str] = ()) -> list[Outcome]:
    """Run every unfinished task of the matrix; returns the outcomes of the runs made now.

    *guard*: KEY=VALUE settings of the daemons' guard in every daemon arm (``--guard``).  They
    are part of what the results mean, so a folder refuses to resume with other ones."""
    if policy_file is not None and not policy_file.is_file():
        raise MatrixError(f"--policy-file {policy_file}: no such file (give a policy exported by ccswitch train)")
    if jobs < 1:
        raise MatrixError(f"--jobs must be >= 1, got {jobs}")
    if ray_address is None and os.geteuid() != 0:
        raise MatrixError("matrix runs use network namespaces and BPF: run as root (sudo)")
    guard = list(guard)
    try:
        settings = DaemonSettings(guard=tuple(guard_setting(g) for g in guard))
    except ValueError as e:
        raise MatrixError(str(e)) from None
    if problems := check_settings(settings):
        raise MatrixError(f"--guard: {problems[0]}")
    tasks = plan(folder, arms, seeds, scenarios=scenarios)
    if ray_address is not None:  # before anything is written: a wrong address leaves no results folder
        from .raypool import check_address

        check_address(ray_address, MatrixError)
    results.mkdir(parents=True, exist_ok=True)
    effective = effective_guard(settings)
    check_same_guard(results, guard, effective)
    (results / "matrix.json").write_text(json.dumps({
        "scenarios": str(folder.resolve()), "arms": list(check_arms(arms)), "seeds": seeds,
        "policy_file": str(policy_file.resolve()) if policy_file else None,
        "policy_sha256": _policy_digest(policy_file) if "dqn" in arms else None, "guard": guard,
        "guard_effective": effective}, indent=2) + "\n")
    todo = [t for t in tasks if not finished(t.run_dir(results))]
    prog = MatrixProgress(len(tasks), len(tasks) - len(todo), enabled=progress)
    if not todo:
        prog.close()
        print(f"matrix: all {len(tasks)} runs already finished in {results}", file=sys.stderr)
        return []
    policy = policy_file.resolve() if policy_file else None
    old_term = signal.signal(signal.SIGTERM, _term_as_interrupt)  # kill/systemd stop the runs like Ctrl-C
    try:
        if ray_address is not None:
            from .cluster import run_on_ray

            outcomes = run_on_ray(todo, results, policy, timeout_s, ray_address, runs_per_node,
                                  lambda o: _record(o, results, prog), guard=guard)
        else:
            from ccswitch.bpf.pcc import pcc_held

            # parallel runs share PCC's registration, which its holder keeps while any of them uses
            # it (bpf/holder.py); held here too, it is registered (and verified) once per matrix
            with pcc_held(jobs > 1, on_error=_pcc_not_held):
                outcomes = _run_local(todo, results, policy, timeout_s, jobs, prog, guard)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        prog.close()
    failed = [o for o in outcomes if not o.ok]
    print(f"matrix: {len(outcomes) - len(failed)} runs finished, {len(failed)} failed "
          f"({len(tasks) - len(todo)} were already done) -> {results}", file=sys.stderr)
    for o in failed:
        print(f"matrix: FAILED {o.task.key}: {o.error} (log: {o.task.log_path(results)})", file=sys.stderr)
    return outcomes


def _pcc_not_held(e: Exception) -> None:
    print(f"matrix: cannot register PCC for the parallel runs ({e}); each run registers it itself",
          file=sys.stderr)


def _term_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _record(o: Outcome, results: Path, prog: MatrixProgress) -> None:
    if not o.ok:
        with (results / "failures.jsonl").open("a") as fh:
            fh.write(json.dumps({"run": o.task.key, "error": o.error, "log": str(o.task.log_path(results)),
                                 "wall_s": round(o.wall_s, 1), "at": time.time()}) + "\n")
    prog.update(o, o.task.log_path(results))


def _run_local(todo: Iterable[Task], results: Path, policy: Path | None, timeout_s: float, jobs: int,
               prog: MatrixProgress, guard: Sequence[str] = ()) -> list[Outcome]:
    stop = threading.Event()
    outcomes: list[Outcome] = []
    pending = list(todo)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        running: set[Future[Outcome]] = set()
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    running.add(pool.submit(execute, pending.pop(0), results, policy, timeout_s, stop, guard))
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    o = fut.result()
                    outcomes.append(o)
                    _record(o, results, prog)
        except KeyboardInterrupt:
            stop.set()
            for fut in running:
                fut.result()
            raise
    return outcomes


def main(argv: Sequence[str] | None = None) -> None:
    """The child process of one run (``one``); the user-facing CLI is ``ccswitch testbed matrix``."""
    ap = argparse.ArgumentParser(prog="python -m ccswitch.testbed.runs.matrix")
    sub = ap.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one", help="one run of the matrix (what `matrix run` starts per task)")
    one.add_argument("file", type=Path)
    one.add_argument("arm")
    one.add_argument("seed", type=int)
    one.add_argument("run_dir", type=Path)
    one.add_argument("--policy-file", type=Path)
    one.add_argument("--guard", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    try:
        run_one(args.file, args.arm, args.seed, args.run_dir, args.policy_file, args.guard)
    except Exception as e:  # the parent reads the last error line of the log
        print(f"matrix run: error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
