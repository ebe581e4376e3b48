"""`ccswitch policy serve`: the click command around server.py (docs/remote-control.md)."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time

import click

# the names of agents.CWND_AGENTS, here so that `ccswitch --help` does not import numpy
AGENT_NAMES = ("delay-aimd", "rl-tcp")


@click.command("serve")
@click.option("--listen", default="127.0.0.1:7070", show_default=True, metavar="HOST:PORT",
              help="UDP address to answer on.")
@click.option("--key", "key_file", required=True, type=click.Path(dir_okay=False),
              help="Shared key file (mode 600, >= 16 bytes), the same on every client.")
@click.option("--agent", type=click.Choice(AGENT_NAMES), default="delay-aimd", show_default=True,
              help="cwnd agent for the `remote` congestion control.")
@click.option("--agent-file", type=click.Path(dir_okay=False),
              help="Agent file for rl-tcp (default: the shipped models/rltcp_agent_delay.json).")
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False),
              help="DQN policy file for ccswitchd's CCA requests (default: the shipped models/policy.json).")
@click.option("--no-cca", is_flag=True, help="Answer cwnd requests only.")
@click.option("--batch-ms", type=click.FloatRange(0, 100), default=2.0, show_default=True,
              help="Requests arriving within this window are decided together.")
@click.option("--deadline-ms", type=click.FloatRange(1, 10000), default=100.0, show_default=True,
              help="Deadline for requests that carry none (0): later answers are dropped.")
@click.option("--l4s", is_flag=True, help="Send the answers as L4S (DSCP 40 + ECT(1)).")
@click.option("--added-latency-ms", type=click.FloatRange(0, 10000), default=0.0,
              help="Experiments: hold every answer this long (an emulated control path, paper 003 stage 2).")
def serve(listen: str, key_file: str, agent: str, agent_file: str | None, policy_file: str | None, no_cca: bool,
          batch_ms: float, deadline_ms: float, l4s: bool, added_latency_ms: float) -> None:
    """Answer cwnd decisions (`remote` CC) and CCA decisions (ccswitchd) over UDP, HMAC-authenticated."""
    from ccswitch.remote import protocol as p
    from ccswitch.remote.agents import CcaPolicy, cwnd_agent
    from ccswitch.remote.client import L4S_TOS
    from ccswitch.remote.server import PolicyServer, parse_hostport
    from ccswitch.remote.server import serve as run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        addr = parse_hostport(listen)
        key = p.load_key(key_file)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    try:
        decider = cwnd_agent(agent, agent_file)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    cca = None if no_cca else CcaPolicy(policy_file)
    server = PolicyServer(key, decider, cca, batch_s=batch_ms / 1000,
                          default_deadline_s=deadline_ms / 1000, added_latency_s=added_latency_ms / 1000)

    async def main() -> None:
        stop, ready = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        task = asyncio.create_task(run(server, addr, tos=L4S_TOS if l4s else 0, ready=ready, stop=stop))
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():  # failed before listening (bind): raise its error
            waiter.cancel()
            await task
            return
        click.echo(f"policy server listening on {addr[0]}:{addr[1]} (cwnd agent {agent}, "
                   f"cca {'off' if cca is None else cca.policy_id.hex()})", err=True)
        serving[:] = [time.monotonic(), time.process_time()]
        await task

    serving: list[float] = []  # (wall, CPU) clocks once listening: the stats' serving_cpu_s / serving_wall_s
    try:
        asyncio.run(main())
    except OSError as e:
        raise click.ClickException(f"cannot listen on {listen}: {e.strerror}") from None
    stats = server.stats.as_dict()
    if serving:  # the CPU the serving took (all threads of the process; imports and policy load excluded)
        stats.update(serving_wall_s=round(time.monotonic() - serving[0], 3),
                     serving_cpu_s=round(time.process_time() - serving[1], 3))
    click.echo(json.dumps(stats), err=True)
