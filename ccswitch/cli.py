"""ccswitch command line.

Every failure the user can fix ends as one line `ccswitch: error: ...` on
stderr and exit status 1 (2 for usage errors, as click does).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import textwrap
import time
from collections.abc import Callable, Iterator

import click

from ccswitch.bpf.libbpf import BpfError
from ccswitch.bpf.switcher import INHERIT_MODES, SwitchError
from ccswitch.daemon.protocol import ENV_SOCKET, ProtocolError
from ccswitch.host import HostError
from ccswitch.sampler import check_interval
from ccswitch.tables import Column, num, parse_columns, print_table, select, terminal_width

USER_ERRORS = (HostError, BpfError, SwitchError, ProtocolError, ValueError, OSError)

def _scaled(field: str, div: float, nd: int = 2) -> Callable[[dict], str]:
    return lambda r: num(None if r[field] is None else r[field] / div, nd)


FLOW_COLUMNS = (  # the monitor's table; rank 0 always shown, higher ranks dropped first when narrow
    Column("flow", lambda r: str(r["flow_id"])),
    Column("local", lambda r: f"{r['src']}:{r['sport']}", rank=2, right=False),
    Column("remote", lambda r: f"{r['dst']}:{r['dport']}", rank=1, right=False),
    Column("cca", lambda r: r["cca"], right=False),
    Column("goodput", _scaled("goodput_bps", 1e6), header="goodput Mb/s"),
    Column("rtt", _scaled("rtt_us", 1e3), header="rtt ms"),
    Column("minrtt", _scaled("min_rtt_us", 1e3), rank=3, header="minrtt ms"),
    Column("jitter", _scaled("jitter_us", 1e3), rank=2, header="jitter ms"),
    Column("loss", _scaled("loss_rate", 1e-2), rank=1, header="loss %"),
    Column("cwnd", lambda r: str(r["cwnd_segs"]), rank=2),
    Column("sndq", _scaled("sndq_bytes", 1e3, 0), rank=3, header="sndq KB"),
)


def _json_safe(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


@contextlib.contextmanager
def _in_netns(name: str | None) -> Iterator[None]:
    if not name:
        yield
        return
    from ccswitch.testbed.runs.netns import entered

    with entered(name):
        yield


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--netns", metavar="NAME", help="Run inside network namespace NAME (/run/netns/NAME).")
@click.option("--socket", metavar="PATH", envvar=ENV_SOCKET,
              help="ccswitchd's control socket (default /run/ccswitch/ccswitchd.sock; env CCSWITCH_SOCKET).")
@click.option("-v", "--verbose", is_flag=True, help="Log libbpf's messages.")
@click.pass_context
def cli(ctx: click.Context, netns: str | None, socket: str | None, verbose: bool) -> None:
    """ccswitch: watch every TCP flow and switch its congestion control live."""
    import logging

    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    ctx.obj = {"netns": netns, "socket": socket}


def _via_daemon(ctx: click.Context, op: str, **args: object) -> tuple[bool, object]:
    """Ask a running ccswitchd; (False, None) when none runs (or --netns without --socket)."""
    if ctx.obj["netns"] and not ctx.obj["socket"]:
        return False, None
    from ccswitch.daemon.commands import daemon_or_none

    return daemon_or_none(ctx, op, **args)


@cli.command()
@click.option("--interval", default=1.0, show_default=True, help="Sampling interval, s (>= 0.1).")
@click.option("--count", default=1, show_default=True, help="Tables to print (0 = until Ctrl-C).")
@click.option("--all", "show_all", is_flag=True, help="Include idle flows (no bytes in the interval).")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of FlowSample rows per interval.")
@click.option("--wide", is_flag=True, help="Every column, whatever the terminal's width.")
@click.option("-o", "--columns", "columns", metavar="A,B,...",
              help="Exactly these columns, in this order (e.g. -o flow,cca,rtt,loss).")
@click.pass_context
def flows(ctx: click.Context, interval: float, count: int, show_all: bool, as_json: bool, wide: bool,
          columns: str | None) -> None:
    """Live per-flow table: CCA, goodput, RTT, jitter, loss, cwnd (from ccswitchd when it runs: + Q-values).

    On a terminal the columns that fit its width are shown (the rest are
    named under the table); piped, every column.
    """
    from ccswitch.dataplane import DataPlane, install_signal_handlers

    names = parse_columns(columns)
    running, rows = _via_daemon(ctx, "flows")
    if running:
        from ccswitch.daemon.commands import daemon_flow_columns

        n = 0
        while True:
            assert isinstance(rows, list)
            shown = rows if show_all else [r for r in rows if r["sent_segs"] or r["delivered_segs"] or r["sndq_bytes"]]
            if as_json:
                click.echo(json.dumps(shown))
            else:
                acts = next((list(r["q"]) for r in shown if r.get("q")), [])
                print_table(daemon_flow_columns(acts), sorted(shown, key=lambda r: r["flow_id"]),
                            title=f"{len(shown)} flows (from ccswitchd)", wide=wide, names=names)
            n += 1
            if count and n >= count:
                return
            time.sleep(interval)
            _, rows = _via_daemon(ctx, "flows")

    check_interval(interval)
    select(FLOW_COLUMNS, names)  # a bad -o fails before the monitor loads
    install_signal_handlers()
    with _in_netns(ctx.obj["netns"]), DataPlane(pcc=False) as dp:
        dp.sample()
        n = 0
        while count == 0 or n < count:
            time.sleep(interval)
            rows = dp.sample().to_pylist()
            if not show_all:
                rows = [r for r in rows if r["sent_segs"] or r["delivered_segs"] or r["sndq_bytes"]]
            n += 1
            if as_json:
                click.echo(json.dumps([_json_safe(r) for r in rows]))
            else:
                print_table(FLOW_COLUMNS, sorted(rows, key=lambda r: r["flow_id"]),
                            title=f"{len(rows)} flows, {interval:g} s interval", wide=wide, names=names)


@cli.command()
@click.option("--interval", default=1.0, show_default=True, help="Refresh interval, s (>= 0.1).")
@click.option("--all", "show_all", is_flag=True, help="Include idle flows (no bytes in the interval).")
@click.option("--wide", is_flag=True, help="Every column, whatever the terminal's width (wider lines are cropped).")
@click.option("-o", "--columns", "columns", metavar="A,B,...", help="Exactly these columns, in this order.")
@click.pass_context
def top(ctx: click.Context, interval: float, show_all: bool, wide: bool, columns: str | None) -> None:
    """Live view: flows, CCA, throughput, RTT, Q-values, the guard's last decision; q or Ctrl-C quits."""
    from ccswitch.top import daemon_frame, monitor_frame, run_top

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise ValueError("ccswitch top needs a terminal; for a stream use `ccswitch flows --count 0` (or --json)")
    check_interval(interval)
    names = parse_columns(columns)
    running, _ = _via_daemon(ctx, "status")
    if running:
        def from_daemon() -> tuple:
            _, st = _via_daemon(ctx, "status")
            _, rows = _via_daemon(ctx, "flows")
            return daemon_frame(st or {}, rows or [], show_all)  # type: ignore[arg-type]

        _, first = _via_daemon(ctx, "flows")  # a bad -o fails here, in one line, before the screen
        select(daemon_frame({}, first or [], True)[1], names)  # type: ignore[arg-type]
        run_top(from_daemon, interval, wide=wide, names=names)
        return
    from ccswitch.dataplane import DataPlane, install_signal_handlers

    select(FLOW_COLUMNS, names)
    install_signal_handlers()
    with _in_netns(ctx.obj["netns"]), DataPlane(pcc=False) as dp:
        dp.sample()
        time.sleep(interval)  # the first frame's rates need one interval
        run_top(lambda: monitor_frame(dp.sample().to_pylist(), interval, show_all), interval, wide=wide, names=names)


@cli.command()
@click.argument("flow", type=int)
@click.argument("cca")
@click.option("--inherit", type=click.Choice(sorted(INHERIT_MODES)), default="limited",
              show_default=True, help="State carried over to the new algorithm.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def switch(ctx: click.Context, flow: int, cca: str, inherit: str, as_json: bool) -> None:
    """Switch live flow FLOW (socket cookie, see `ccswitch flows`) to CCA.

    With ccswitchd running this is a manual override: the flow stays pinned
    to CCA (the daemon's guard keeps it) until `ccswitch switch FLOW auto`.
    """
    from ccswitch.dataplane import DataPlane, install_signal_handlers

    running, out = _via_daemon(ctx, "switch", flow=flow, cca=cca, inherit=inherit)
    if running:
        assert isinstance(out, dict)
        if as_json:
            click.echo(json.dumps(out))
        elif cca == "auto":
            click.echo(f"flow {flow}: pin released; ccswitchd decides again")
        else:
            click.echo(f"flow {flow}: {out['cca_before']} -> {out['cca_after']} ({out['inherit']}), pinned by "
                       f"ccswitchd until `ccswitch switch {flow} auto`")
        return
    if cca == "auto":
        raise SwitchError("'auto' releases a pin of the running daemon, and no ccswitchd answers here")

    install_signal_handlers()
    with _in_netns(ctx.obj["netns"]), DataPlane(monitor=False, pcc=cca == "pcc", prague=cca == "prague") as dp:
        res = dp.switch(flow, cca, inherit)
    if as_json:
        click.echo(json.dumps(res.as_dict()))
    if not res.ok:
        raise SwitchError(res.error or "switch failed")
    if not as_json:
        click.echo(f"flow {flow}: {res.cca_before} -> {res.cca_after} ({inherit}"
                   f"{', private state seeded' if res.seeded else ''}); "
                   f"cwnd {res.cwnd_before} -> {res.cwnd_after}, srtt {res.srtt_us_after} us")


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Check kernel, BTF, bpffs, cgroup v2, CCAs and capabilities; say what to fix."""
    from ccswitch.doctor import run_checks

    with _in_netns(ctx.obj["netns"]):
        checks = run_checks()
    bad = [c for c in checks if c.required and not c.ok]
    if as_json:
        click.echo(json.dumps([c.__dict__ for c in checks]))
    else:
        width = terminal_width()
        for c in checks:
            mark = "ok  " if c.ok else ("FAIL" if c.required else "warn")
            line = f"[{mark}] {c.name}: {c.detail}"
            if not c.ok and c.fix:
                line += f"  -> fix: {c.fix}"
            # a terminal gets whole words per line, continuation under the name; piped, one line per check
            click.echo(textwrap.fill(line, width, subsequent_indent=" " * 7, break_long_words=False,
                                     break_on_hyphens=False) if width else line)
    if bad:
        sys.exit(1)


@cli.command()
@click.option("--duration", default=20, show_default=True, help="Length of the demo, s.")
@click.option("--rate", default=50.0, show_default=True, help="Bottleneck rate, Mbit/s.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def demo(duration: int, rate: float, as_json: bool) -> None:
    """Two iperf3 flows through a veth bottleneck; one switched bbr -> cubic -> pcc."""
    from ccswitch.demo import run_demo

    run_demo(duration_s=duration, rate_mbit=rate, as_json=as_json)


@cli.group()
def testbed() -> None:
    """Emulated testbed: run scenario files, report run folders, clean up."""


def _add_matrix() -> None:
    from ccswitch.cli_matrix import matrix

    testbed.add_command(matrix)


_add_matrix()


def _testbed_fail(exc: BaseException) -> None:
    import os

    if os.environ.get("CCSWITCH_DEBUG"):
        import traceback

        traceback.print_exception(exc)
    msg = str(exc).replace("\n", " ") or type(exc).__name__
    click.echo(f"ccswitch: error: {msg}", err=True)
    sys.exit(1)


@testbed.command("run")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Results folder (default: results/NAME-YYYYmmdd-HHMMSS).")
@click.option("--server", metavar="ADDR",
              help="External mode: send to this real iperf3 server instead of namespaces.")
@click.option("--client", "clients", type=int, multiple=True, metavar="N",
              help="External mode: run the flows of client N here (repeatable; default all).")
@click.option("--start-at", type=float, metavar="EPOCH",
              help="External mode: start the scenario clock at this Unix time (line up several hosts).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--quiet", is_flag=True, help="No progress line.")
def testbed_run(scenario: str, out_dir: str | None, server: str | None, clients: tuple[int, ...],
                start_at: float | None, no_plots: bool, quiet: bool) -> None:
    """Run SCENARIO.toml: one folder per repetition with raw outputs, table and plots."""
    from pathlib import Path

    from ccswitch.dataplane import install_signal_handlers
    from ccswitch.testbed.runs.runner import External, run_scenario
    from ccswitch.testbed.scenario import load_scenario

    if (clients or start_at is not None) and not server:
        raise click.UsageError("--client and --start-at need --server (external mode)")
    try:
        sc = load_scenario(scenario)
        install_signal_handlers()
        ext = External(server, tuple(clients), start_at) if server else None
        runs = run_scenario(sc, Path(out_dir) if out_dir else None, external=ext,
                            progress=not quiet, plots=not no_plots)
    except (RuntimeError, *USER_ERRORS) as exc:  # RunError, EmulatorError, IperfError, NetnsError ...
        _testbed_fail(exc)
    for r in runs:
        click.echo(f"{r}/table.md")


@testbed.command("report")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--no-plots", is_flag=True, help="Tables only.")
def testbed_report(directory: str, no_plots: bool) -> None:
    """Recompute tables and plots of a run folder (or of every run folder below DIRECTORY)."""
    from pathlib import Path

    from ccswitch.testbed.reports.run import report_dir

    try:
        runs = report_dir(Path(directory), plots=not no_plots)
    except (KeyError, *USER_ERRORS) as exc:
        _testbed_fail(exc)
    for r in runs:
        click.echo((Path(r) / "table.md").read_text())


@testbed.command("merge")
@click.argument("out", type=click.Path(file_okay=False))
@click.argument("parts", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
def testbed_merge(out: str, parts: tuple[str, ...]) -> None:
    """Join the run folders of several client hosts (external mode) into OUT and report it."""
    from pathlib import Path

    from ccswitch.testbed.reports.run import report_run
    from ccswitch.testbed.reports.run_folder import merge_runs

    try:
        merged = merge_runs(Path(out), [Path(p) for p in parts])
        report_run(merged)
    except (KeyError, *USER_ERRORS) as exc:
        _testbed_fail(exc)
    click.echo((merged / "table.md").read_text())


@testbed.command("cleanup")
@click.option("--unowned", is_flag=True, help="Also remove ccs-* namespaces without an owner record.")
def testbed_cleanup(unowned: bool) -> None:
    """Remove testbed namespaces (and their processes) left by crashed or killed runs."""
    from ccswitch.testbed.runs.runner import cleanup

    removed = cleanup(include_unowned=unowned)
    click.echo(f"removed {len(removed)} namespace(s)" + (f": {' '.join(removed)}" if removed else ""))


# Traces, training and evaluation (issue 4): the commands live next to their code and
# import numpy/pyarrow/TensorFlow only when they run.
from ccswitch.daemon.commands import daemon, history, policy, status  # noqa: E402
from ccswitch.datasets.commands import dataset  # noqa: E402
from ccswitch.models.commands import evaluate_cmd, train_cmd  # noqa: E402
from ccswitch.remote.cli import serve as policy_serve  # noqa: E402

cli.add_command(dataset)
cli.add_command(train_cmd)
cli.add_command(evaluate_cmd)
for _cmd in (status, policy, history, daemon):
    cli.add_command(_cmd)
policy.add_command(policy_serve)  # the policy server (issue 15, docs/remote-control.md)


def main() -> None:
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except USER_ERRORS as exc:
        msg = str(exc).replace("\n", " ")
        click.echo(f"ccswitch: error: {msg}", err=True)
        sys.exit(1)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
