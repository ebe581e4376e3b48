"""The daemon-facing CLI commands: status, policy show/explain, history, daemon install.

`ccswitch flows` and `ccswitch switch` (ccswitch/cli.py) also go through the
daemon when one answers on the control socket (daemon_or_none).  The socket:
`ccswitch --socket PATH`, else $CCSWITCH_SOCKET, else the default
/run/ccswitch/ccswitchd.sock.  Every command takes --json.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import click

from ccswitch.daemon.protocol import NoDaemon, ProtocolError, request, socket_path
from ccswitch.tables import Column, parse_columns, print_table, select, terminal_width, wrap_fields


def sock_of(ctx: click.Context) -> str:
    root = ctx.find_root()
    return socket_path((root.obj or {}).get("socket"))


def ask(ctx: click.Context, op: str, **args: Any) -> Any:
    """A request that needs the daemon (NoDaemon -> a clear error)."""
    path = sock_of(ctx)
    try:
        return request(path, op, **args)
    except NoDaemon as e:
        raise ProtocolError(f"{e}; start it (systemctl start ccswitchd, or ccswitchd --socket {path}) or point "
                            "--socket / CCSWITCH_SOCKET at it") from None


def daemon_or_none(ctx: click.Context, op: str, **args: Any) -> tuple[bool, Any]:
    """(True, result) when a daemon answered, (False, None) when none runs; other errors raise."""
    try:
        return True, request(sock_of(ctx), op, **args)
    except NoDaemon:
        return False, None


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return fmt.format(v)


def _ts(t: float | None) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3] if t else "-"


# --------------------------------------------------------------------- status
@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """The daemon: policy, tick timing, flows per CCA, switches, unfairness per path."""
    st = ask(ctx, "status")
    if as_json:
        click.echo(json.dumps(st))
        return
    pol = st["policy"]
    click.echo(f"ccswitchd pid {st['pid']}, up {st['uptime_s']:.0f} s, socket {st['socket']}, config {st['config']}")
    click.echo(f"policy: {pol.get('kind')}" + (f" ({pol['file']}, {pol.get('checksum', '')[:19]})"
                                               if pol.get("file") else "")
               + (" [observe-only: never switches]" if st["observe_only"] else ""))
    click.echo(f"tick {st['tick_s']:g} s, decisions every {st['decision_interval_s']:g} s, inherit {st['inherit']}, "
               f"allowed: {' '.join(st['allowed'])}")
    # the source and its meaning (bpf/pcc.py SOURCES); older daemons send the source only
    click.echo(f"pcc: {st['pcc']}" + (f": {st['pcc_detail']}" if st.get("pcc_detail") else "")
               + ("" if st.get("pcc_seedable", True) else '; inherit = "full" into pcc is not seeded'))
    click.echo(f"tick time ms: last {st['tick_ms_last']:.2f}, mean {st['tick_ms_mean']:.2f}, p50 "
               f"{st['tick_ms_p50']:.2f}, p99 {st['tick_ms_p99']:.2f}, max {st['tick_ms_max']:.2f} "
               f"over {st['ticks']} ticks that read the monitor ({st.get('idle_ticks', 0)} did not)")
    per = ", ".join(f"{k} {v}" for k, v in sorted(st["flows_per_cca"].items())) or "none"
    click.echo(f"flows: {st['flows']} ({per}); managed {st['managed']}, pinned {st['pinned']}")
    click.echo(f"decisions {st['decisions']}, switches {st['switches']} (explore {st.get('explores', 0)}, "
               f"escape {st.get('escapes', 0)}), reverts "
               f"{st['reverts']}, manual {st['manual']}, failed {st['failed']}")
    for u in st.get("unfairness", []):
        click.echo(f"path {u['path']}: {u['flows']} flows, Jain {u['jain']:.3f}, Thratio "
                   f"{u['thratio_min']:.2f} .. {u['thratio_max']:.2f}")


# ---------------------------------------------------------------------- flows
def _scaled(field: str, div: float) -> Any:
    return lambda r: _num(r[field] / div if r.get(field) is not None else None)


def _last_decision(r: dict[str, Any]) -> str:
    return f"{r['last_action']}: {r['last_reason']}" if r.get("last_action") else "-"


def daemon_flow_columns(actions: list[str]) -> list[Column]:
    """`ccswitch flows` from the daemon: the monitor's numbers plus Q-values, pin, last decision."""
    return [
        Column("flow", lambda r: str(r["flow_id"])),
        Column("remote", lambda r: f"{r['dst']}:{r['dport']}", rank=3, right=False),
        Column("cca", lambda r: r["cca"], right=False),
        Column("thr", _scaled("throughput_bps", 1e6), header="thr Mb/s"),
        Column("rtt", _scaled("rtt_us", 1e3), header="rtt ms"),
        Column("jitter", _scaled("jitter_us", 1e3), rank=3, header="jitter ms"),
        Column("loss", _scaled("loss_rate", 1e-2), rank=2, header="loss %"),
        Column("thratio", lambda r: _num(r.get("thratio")), rank=2, header="Thratio"),
        *[Column(f"q_{a}", lambda r, a=a: _num((r.get("q") or {}).get(a)), rank=1, header=f"Q {a}")
          for a in actions],
        Column("pin", lambda r: r.get("pinned") or "", rank=3, right=False),
        Column("decision", _last_decision, rank=1, right=False, text=True, header="last decision"),
    ]


# --------------------------------------------------------------------- policy
@click.group()
def policy() -> None:
    """Inspect the policy: model card, Q-values, what the guard would do."""


def _offline_policy(path: str | None) -> Any:
    from ccswitch.models.policy import load_policy

    return load_policy(path)


@policy.command("show")
@click.option("--file", "path", type=click.Path(dir_okay=False), help="Policy file (default: the running daemon's, "
              "else the shipped models/policy.json).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def policy_show(ctx: click.Context, path: str | None, as_json: bool) -> None:
    """Model card: features, actions, network, normalisation, training hyperparameters and results."""
    desc = None
    if path is None:
        _, desc = daemon_or_none(ctx, "policy_show")
    if desc is None:
        from ccswitch.daemon.policies import DqnDecider

        desc = DqnDecider(_offline_policy(path)).describe()
        desc["source"] = "file"
    else:
        desc["source"] = "daemon"
    if as_json:
        click.echo(json.dumps(desc))
        return
    click.echo(f"policy: {desc['kind']} (from the {desc['source']})")
    width = terminal_width()
    for k in ("file", "checksum", "cca", "decides_with", "memory_s", "weights"):
        if k in desc:
            click.echo(wrap_fields(k, [str(desc[k])], width))
    click.echo(f"actions: {' '.join(desc['actions'])}")
    if "features" not in desc:
        return
    click.echo(f"network: {desc['activation']}, layers {' -> '.join(str(s) for s in desc['layers'])}")
    click.echo(f"observation: {desc['n_features']} features, window {desc['window']} x {desc['interval_s']:g} s")
    norm = desc["normalisation"]
    for name, m, s in zip(norm["features"], norm["mean"], norm["std"], strict=True):
        click.echo(f"  {name:<24} mean {m:9.3f}  std {s:8.3f}")
    click.echo("  + " + " ".join(f for f in desc["features"] if not f.startswith("w")))
    tr = desc.get("training") or {}

    def fields(label: str, items: list[str]) -> None:
        click.echo(wrap_fields(label, items, width))

    def values(d: dict[str, Any]) -> list[str]:
        return [f"{k}={_num(v, '{:.3f}') if isinstance(v, float) else v}" for k, v in d.items()]

    for k in ("created", "corpus", "corpus_fingerprint", "corpus_space", "corpus_captures", "episodes",
              "env_steps", "wall_time_s"):
        if k in tr:
            fields(k, [str(tr[k])])
    if "hyperparameters" in tr:  # the reward has its own line
        fields("hyperparameters", [f"{k}={v}" for k, v in tr["hyperparameters"].items() if k != "reward"])
    if "reward" in tr:
        fields("reward", [f"{k}={v}" for k, v in tr["reward"].items()])
    if "heldout_eval" in tr:
        fields("held-out evaluation", values(tr["heldout_eval"]))
    if "versions" in tr:
        fields("versions", [f"{k} {v}" for k, v in tr["versions"].items()])
    for split, ev in sorted((desc.get("evaluation") or {}).items()):
        if isinstance(ev, dict):  # end to end, per split of the scenario space (models/evaluate_matrix.py)
            fields(f"end to end, {split} split", values(ev))


@policy.command("explain")
@click.option("--flow", type=int, help="A live flow (socket cookie) of the running daemon.")
@click.option("--state", "state_text", metavar="K=V,...",
              help="A hypothetical steady state, e.g. throughput_mbps=5,rtt_ms=80,cca=bbr,others=1,share=0.2")
@click.option("--file", "path", type=click.Path(dir_okay=False), help="Policy file for --state without a daemon.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def policy_explain(ctx: click.Context, flow: int | None, state_text: str | None, path: str | None,
                   as_json: bool) -> None:
    """Q-values per CCA, the normalised features, and what the guard would do."""
    from ccswitch.daemon.explain import STATE_KEYS, explain_state, parse_state

    if (flow is None) == (state_text is None):
        raise click.UsageError("give exactly one of --flow ID or --state K=V,... (keys: " + ", ".join(STATE_KEYS)
                               + ")")
    if flow is not None:
        out = ask(ctx, "explain", flow=flow)
    else:
        state = parse_state(state_text or "")
        running, out = (False, None) if path else daemon_or_none(ctx, "explain", state=state)
        if not running:
            from ccswitch.daemon.config import defaults
            from ccswitch.daemon.guard import Guard, GuardConfig

            pol = _offline_policy(path)
            out = explain_state(pol, state)
            g = Guard(GuardConfig.from_mapping(defaults().guard))
            out["guard"] = g.would(None, out["cca"], out["q"]).as_dict()
            out["guard"]["note"] = "no daemon: default guard settings, no flow history"
    if as_json:
        click.echo(json.dumps(out))
        return
    width = terminal_width()
    if flow is not None:
        click.echo(f"flow {flow}")
    else:
        click.echo(wrap_fields("state", [f"{k}={v}" for k, v in (out.get("state") or {}).items()], width))
    click.echo(f"current: {out['cca']}")
    click.echo("Q-values: " + "  ".join(f"{a} {_num(v, '{:.3f}')}" for a, v in out["q"].items()))
    g = out["guard"]
    click.echo(wrap_fields("guard", f"{g['action']} -> {g['to']} ({g['reason']})".split(" "), width, sep=" "))
    if out.get("features"):
        click.echo("features (normalised):")
        for k, v in out["features"].items():
            click.echo(f"  {k:<32} {v:8.3f}")


# -------------------------------------------------------------------- history
HISTORY_COLUMNS = (
    Column("time", lambda r: _ts(r["ts"]), right=False),
    Column("flow", lambda r: str(r["flow"])),
    Column("from", lambda r: r["from"], right=False),
    Column("to", lambda r: r["to"], right=False),
    Column("kind", lambda r: r["kind"], rank=1, right=False),
    Column("verdict", lambda r: r.get("verdict", "-"), rank=1, right=False),
    Column("reason", lambda r: r["reason"], rank=1, right=False, text=True),
)


@click.command()
@click.option("--limit", default=50, show_default=True, help="Newest N records (0 = all kept).")
@click.option("--json", "as_json", is_flag=True)
@click.option("--wide", is_flag=True, help="Every column and the whole reason, whatever the terminal's width.")
@click.option("-o", "--columns", "columns", metavar="A,B,...",
              help=f"Exactly these columns, in this order (from: {', '.join(c.name for c in HISTORY_COLUMNS)}).")
@click.pass_context
def history(ctx: click.Context, limit: int, as_json: bool, wide: bool, columns: str | None) -> None:
    """Switches: time, flow, from, to, kind, reason, post-switch verdict."""
    names = parse_columns(columns)
    select(HISTORY_COLUMNS, names)
    rows = ask(ctx, "history", limit=limit)
    if as_json:
        click.echo(json.dumps(rows))
        return
    print_table(HISTORY_COLUMNS, rows, title=f"{len(rows)} switches", wide=wide, names=names)


# --------------------------------------------------------------------- daemon
@click.group()
def daemon() -> None:
    """The ccswitchd service: install the unit, config and man pages; check a config."""


@daemon.command("install")
@click.option("--root", default="/", show_default=True, help="Install below this directory (packaging, tests).")
def daemon_install(root: str) -> None:
    """Place the systemd unit, the default config and the man pages (idempotent; keeps a modified config)."""
    from pathlib import Path

    from ccswitch.daemon.install import install

    for line in install(Path(root)):
        click.echo(line)


@daemon.command("check-config")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
def daemon_check_config(file: str | None) -> None:
    """Validate a config file (default /etc/ccswitch/ccswitch.toml): one line per problem."""
    import sys

    from ccswitch.daemon.main import main as daemon_main

    sys.exit(daemon_main(["--check-config", *(["--config", file] if file else [])]))
