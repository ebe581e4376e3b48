"""``ccswitch train`` and ``ccswitch evaluate`` (registered on the main CLI in ccswitch/cli.py).

Only click is imported here; TensorFlow is imported by ``train`` when it runs
and never by ``evaluate`` (the policy file runs on numpy).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ccswitch.datasets.commands import fail

__all__ = ["evaluate_cmd", "train_cmd"]


@click.command("train")
@click.option("--data", type=click.Path(exists=True, file_okay=False), multiple=True,
              help="Corpus folder (default: the shipped sample, datasets/sample/); repeat it to train on "
                   "several corpora read as one, e.g. --data datasets/space --data datasets/sample.")
@click.option("--out", type=click.Path(file_okay=False), help="Run folder (default: results/train-TIMESTAMP).")
@click.option("--episodes", type=int, help="Training episodes (default 1000, paper 002).")
@click.option("--seed", type=int, help="Random seed (default 1).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a hyperparameter (models/dqn.py Hyperparameters) or reward.KEY (envs/reward.py); "
                   "repeatable, e.g. --set gamma=0.9 --set hidden_units=128,128 --set reward.w_fairness=1.")
@click.option("--export", "export_to", type=click.Path(dir_okay=False),
              help="Also copy the exported policy file here.")
@click.option("--no-plots", is_flag=True, help="Skip the training plots.")
@click.option("--no-tensorboard", is_flag=True, help="Skip the TensorBoard logs.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def train_cmd(data: tuple[str, ...], out: str | None, episodes: int | None, seed: int | None,
              overrides: tuple[str, ...], export_to: str | None, no_plots: bool, no_tensorboard: bool,
              quiet: bool) -> None:
    """Train the DQN on a corpus; writes the policy file, logs, history and plots (paper 002 figs 17-19)."""
    import shutil

    from .dqn import Hyperparameters, apply_overrides, train

    extra = [*([f"episodes={episodes}"] if episodes is not None else []),
             *([f"seed={seed}"] if seed is not None else []), *overrides]
    hp = apply_overrides(Hyperparameters(), extra)
    out_dir = Path(out) if out else Path("results") / f"train-{time.strftime('%Y%m%d-%H%M%S')}"
    corpus = None if not data else data[0] if len(data) == 1 else list(data)
    res = train(hp, corpus, out_dir, progress=not quiet, plots=not no_plots, tensorboard=not no_tensorboard,
                log=lambda m: click.echo(m, err=True))
    if export_to:
        Path(export_to).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(res.policy_path, export_to)
    click.echo(f"policy:      {export_to or res.policy_path}")
    click.echo(f"history:     {res.out_dir / 'history.csv'}")
    if not no_plots:
        click.echo(f"plots:       {res.out_dir / 'plots'}/training_{{reward,loss,accuracy}}.png")
    if not no_tensorboard:
        click.echo(f"tensorboard: .venv/bin/tensorboard --logdir {res.out_dir / 'tensorboard'}")


@click.command("evaluate")
@click.argument("policy", required=False, type=click.Path(dir_okay=False))
@click.option("--data", type=click.Path(exists=True, file_okay=False),
              help="Corpus folder (default: the one the policy was trained on, else the shipped sample).")
@click.option("--corpus-split", "split", type=click.Choice(["heldout", "train", "all"]), default="heldout",
              show_default=True,
              help="Offline: the policy's held-out corpus conditions, its training ones, or all.")
@click.option("--split", "matrix_split", type=click.Choice(["dev", "test"]),
              help="End to end instead: run the dqn arm with POLICY over testbed/scenarios/matrix/SPLIT "
                   "(as root; ~40 s per scenario) and compare with the other arms' runs of that split.")
@click.option("--baseline", type=click.Path(file_okay=False),
              help="With --split: results of the other arms (default: results/matrix-SPLIT; if it holds no "
                   "results, the static and shipped-policy arms are run into it first).")
@click.option("--no-baseline-runs", is_flag=True,
              help="With --split: never run baseline arms; compare with what --baseline holds (maybe nothing).")
@click.option("--seeds", type=click.IntRange(1, 20), default=1, show_default=True, help="With --split.")
@click.option("--jobs", type=click.IntRange(1, 64), default=1, show_default=True, help="With --split.")
@click.option("--guard", "guard", multiple=True, metavar="KEY=VALUE",
              help="With --split: a guard setting of the candidate's daemon, e.g. eval_window_s=0 "
                   "(repeatable; default: the daemon's settings, docs/daemon.md).")
@click.option("--out", type=click.Path(file_okay=False), help="Folder for evaluation.{md,json}, episodes.csv, "
                                                              "evaluation.png (default: results/eval-TIMESTAMP); "
                                                              "with --split the runs and comparison.md.")
@click.option("--no-plot", is_flag=True)
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def evaluate_cmd(policy: str | None, data: str | None, split: str, matrix_split: str | None,
                 baseline: str | None, no_baseline_runs: bool, seeds: int, jobs: int, guard: tuple[str, ...],
                 out: str | None, no_plot: bool, as_json: bool) -> None:
    """Evaluate POLICY (default: the shipped models/policy.json) offline on held-out traces, or
    end to end on the dev or test split of the scenario space (--split).

    Offline it compares cumulative reward and accuracy against paper 002's evaluation
    function with each static CCA, the evaluation function used as a policy,
    and a random policy.  Use --split dev to choose between candidates; --split test
    once for the one you ship.
    """
    from dataclasses import asdict

    if matrix_split:
        _evaluate_matrix(policy, matrix_split, baseline, seeds, jobs, guard, out, run_baseline=not no_baseline_runs)
        return

    from ccswitch.envs.cc_env import CongestionControlEnv
    from ccswitch.envs.replay import DEFAULT_CORPUS, ReplayCorpus
    from ccswitch.envs.reward import RewardConfig

    from .evaluate import evaluate, markdown_table, summarise, write_results
    from .policy import load_policy

    pol = load_policy(policy)
    tr = pol.training or {}
    corpus = data or _trained_on(tr.get("corpus")) or DEFAULT_CORPUS
    replay = ReplayCorpus.load(corpus, actions=pol.actions, window=pol.window, log=lambda m: click.echo(m, err=True))
    if abs(replay.interval_s - pol.interval_s) > 1e-9:
        fail(f"{corpus}: sampled every {replay.interval_s:g} s, the policy decides every {pol.interval_s:g} s")
    ids = replay.ids()
    if split != "all":
        train_ids = [c for c in tr.get("train_conditions", []) if c in replay.conditions]
        test_ids = [c for c in tr.get("test_conditions", []) if c in replay.conditions]
        if not train_ids and not test_ids:  # another corpus: all of it is held out
            test_ids = ids
        ids = test_ids if split == "heldout" else train_ids
        if not ids:
            fail(f"{corpus}: none of the policy's {split} conditions is in this corpus (use --split all)")
    env = CongestionControlEnv(replay, conditions=ids, reward_config=RewardConfig.from_dict(tr.get("reward")),
                               normalisation=pol.normalisation, start="first")
    episodes = evaluate(env, q_fn=pol.q_values)
    stats = summarise(episodes)
    out_dir = Path(out) if out else Path("results") / f"eval-{time.strftime('%Y%m%d-%H%M%S')}"
    meta = {"policy": str(pol.path), "checksum": pol.checksum, "corpus": str(corpus), "split": split,
            "conditions": ids, "reward": env.reward_config.as_dict()}
    write_results(out_dir, episodes, stats, meta)
    if not no_plot:
        from .plots import evaluation_plot

        evaluation_plot(stats, out_dir / "evaluation.png",
                        title=f"{Path(str(pol.path)).name} on {len(ids)} {split} conditions of {Path(corpus).name}")
    if as_json:
        click.echo(json.dumps({"meta": meta, "policies": [asdict(s) for s in stats]}, indent=2))
    else:
        click.echo(f"{pol.path} on {len(ids)} {split} condition(s) of {corpus}:")
        click.echo(markdown_table(stats), nl=False)
        click.echo(f"results: {out_dir}")


def _evaluate_matrix(policy: str | None, split: str, baseline: str | None, seeds: int, jobs: int,
                     guard: tuple[str, ...], out: str | None, *, run_baseline: bool = True) -> None:
    from ccswitch.testbed.runs.matrix import MatrixError

    from .evaluate_matrix import evaluate_on_split
    from .policy import PolicyError, load_policy

    try:
        pol = load_policy(policy)  # a clear error for a bad file before any run starts
    except (PolicyError, OSError) as e:
        fail(e)
    out_dir = Path(out) if out else Path("results") / f"eval-{Path(str(pol.path)).stem}-{split}"
    try:
        doc, failed = evaluate_on_split(Path(str(pol.path)), split, out_dir,
                                        baseline=Path(baseline) if baseline else None, seeds=seeds, jobs=jobs,
                                        guard=guard, run_baseline=run_baseline,
                                        log=lambda m: click.echo(m, err=True))
    except (MatrixError, ValueError) as e:
        fail(e)
    click.echo(doc, nl=False)
    click.echo(f"runs and comparison.md: {out_dir}")
    if failed:
        fail(f"{failed} run(s) failed (see {out_dir}/failures.jsonl); the same command resumes them")


def _trained_on(corpus: str | list[str] | None) -> Path | list[Path] | None:
    """The policy's training corpus (one folder or several), if it is here (relative paths: to the repository)."""
    if not corpus:
        return None
    paths = [Path(c) if Path(c).is_absolute() else Path(__file__).resolve().parent.parent / c
             for c in ([corpus] if isinstance(corpus, str) else corpus)]
    if not all(p.is_dir() for p in paths):
        return None
    return paths[0] if isinstance(corpus, str) else paths
