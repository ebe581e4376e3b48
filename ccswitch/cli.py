"""ccswitch command line.

Every failure the user can fix ends as one line `ccswitch: error: ...` on
stderr and exit status 1 (2 for usage errors, as click does).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Iterator

import click
from rich.console import Console
from rich.table import Table

from ccswitch.bpf.libbpf import BpfError
from ccswitch.bpf.switcher import INHERIT_MODES, SwitchError
from ccswitch.host import HostError
from ccswitch.sampler import check_interval

console = Console()
USER_ERRORS = (HostError, BpfError, SwitchError, ValueError, OSError)

FLOW_COLUMNS = (  # (header, field, format)
    ("flow", "flow_id", "{}"), ("local", None, None), ("remote", None, None),
    ("cca", "cca", "{}"), ("goodput Mb/s", "goodput_bps", "mbit"), ("rtt ms", "rtt_us", "ms"),
    ("minrtt ms", "min_rtt_us", "ms"), ("jitter ms", "jitter_us", "ms"),
    ("loss %", "loss_rate", "pct"), ("cwnd", "cwnd_segs", "{}"), ("sndq KB", "sndq_bytes", "kb"),
)


def _fmt(value: object, fmt: str) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if fmt == "mbit":
        return f"{value / 1e6:.2f}"
    if fmt == "ms":
        return f"{value / 1e3:.2f}"
    if fmt == "pct":
        return f"{value * 100:.2f}"
    if fmt == "kb":
        return f"{value / 1e3:.0f}"
    return fmt.format(value)


def flows_table(rows: list[dict], title: str = "") -> Table:
    table = Table(title=title or None)
    for header, _, _ in FLOW_COLUMNS:
        table.add_column(header, justify="right" if header not in ("local", "remote", "cca") else "left")
    for r in sorted(rows, key=lambda r: r["flow_id"]):
        cells = []
        for header, field, fmt in FLOW_COLUMNS:
            if header == "local":
                cells.append(f"{r['src']}:{r['sport']}")
            elif header == "remote":
                cells.append(f"{r['dst']}:{r['dport']}")
            else:
                cells.append(_fmt(r[field], fmt))
        table.add_row(*cells)
    return table


def _json_safe(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


@contextlib.contextmanager
def _in_netns(name: str | None) -> Iterator[None]:
    if not name:
        yield
        return
    from ccswitch.testbed.netns import entered

    with entered(name):
        yield


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--netns", metavar="NAME", help="Run inside network namespace NAME (/run/netns/NAME).")
@click.option("-v", "--verbose", is_flag=True, help="Log libbpf's messages.")
@click.pass_context
def cli(ctx: click.Context, netns: str | None, verbose: bool) -> None:
    """ccswitch: watch every TCP flow and switch its congestion control live."""
    import logging

    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    ctx.obj = {"netns": netns}


@cli.command()
@click.option("--interval", default=1.0, show_default=True, help="Sampling interval, s (>= 0.1).")
@click.option("--count", default=1, show_default=True, help="Tables to print (0 = until Ctrl-C).")
@click.option("--all", "show_all", is_flag=True, help="Include idle flows (no bytes in the interval).")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of FlowSample rows per interval.")
@click.pass_context
def flows(ctx: click.Context, interval: float, count: int, show_all: bool, as_json: bool) -> None:
    """Live per-flow table: CCA, goodput, RTT, jitter, loss, cwnd."""
    from ccswitch.dataplane import DataPlane, install_signal_handlers

    check_interval(interval)
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
                console.print(flows_table(rows, f"{len(rows)} flows, {interval:g} s interval"))


@cli.command()
@click.argument("flow", type=int)
@click.argument("cca")
@click.option("--inherit", type=click.Choice(sorted(INHERIT_MODES)), default="limited",
              show_default=True, help="State carried over to the new algorithm.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def switch(ctx: click.Context, flow: int, cca: str, inherit: str, as_json: bool) -> None:
    """Switch live flow FLOW (socket cookie, see `ccswitch flows`) to CCA."""
    from ccswitch.dataplane import DataPlane, install_signal_handlers

    install_signal_handlers()
    with _in_netns(ctx.obj["netns"]), DataPlane(monitor=False, pcc=cca == "pcc") as dp:
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
        for c in checks:
            mark = "ok  " if c.ok else ("FAIL" if c.required else "warn")
            line = f"[{mark}] {c.name}: {c.detail}"
            if not c.ok and c.fix:
                line += f"  -> fix: {c.fix}"
            click.echo(line)
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
