"""Training episodes for paper 001's LFQ agent: real TCP flows through linkemu's lfq, one experiment per flow.

Paper 001 (section VI, online learning) trains on flows drawn from one
distribution: bandwidth U[5, 25] Mbit/s, RTT U[5, 25] ms, NewReno or BIC, duration
U[3.75, 6.25] s.  How the clients' TCP is set up is a *sender* profile
(:mod:`ccswitch.testbed.runs.tcp_senders`: SACK per CCA, and CUBIC or ccswitch's BPF
BIC for the paper's BIC, which the caller registers); ``linux`` by default.  During
each flow, at a random time t_e in [0, duration / 2], it performs its
*experiment*: the flow's limit changes once and is then kept to the end; what
the flow earned from t_e to its end, reward = (throughput - ALPHA * mean queue
* MTU) / 1e6 (:func:`ccswitch.models.lfq_actor.reward`), is the label of the
features seen at t_e.  This module produces those (features, limit, reward)
samples on the live namespace testbed (root): :class:`LfqEpisodes` owns one
topology and runs one *episode* per call.

**Episode.**  ``flows_per_run`` TCP flows (default 3) run at once, each from
its own client with its own RTT, CCA, duration and experiment, plus one UDP
*filler* (FILLER_LOAD x b offered, from one more client), through one lfq
uplink of ``(flows_per_run + 1) x b`` Mbit/s with b ~ U[5, 25]: fair queuing
gives every backlogged flow b, so each flow sees the paper's one-flow
bottleneck of bandwidth b.  RTT: 1 ms of link delay each way plus the client's delay line
(``client_delay_ms``) on the ACK path.  Deviation (docs/network/lfq.md): the
paper runs one flow per simulation; real time is the bottleneck of training
here (a 5 s flow takes 5 s), and four flows per run give four samples per
run.  The price: a flow that leaves its share idle (a too small limit) gives
it to the others while they are backlogged, so their throughput can exceed b;
the filler, always backlogged, takes its part of any idle share (so a flow
with a small limit is less often rescued by its neighbours' idleness), and
the reward clips a flow's throughput at b.

**Before and at t_e** (the behaviour policy, ``pre``): each flow keeps a limit
drawn log-uniformly in 1..256 packets for the whole pre-experiment phase
(``pre="random"``), or drawn log-uniformly around the flow's BDP, from 1/4 to
2.8 BDP (``pre="bdp"``: the states an actor that sizes buffers near the BDP
meets, where the CCAs differ most), or the current actor sets it every interval
(``pre=Actor``); the experiment limit is drawn log-uniformly in 1..256
(``explore="uniform"``), or around the flow's BDP, 1/4 to 4 BDP (``explore="bdp"``: the
range where the CCAs' best limits lie, :data:`EXPLORE_BDP_OCTAVES`), or is the actor's limit times
2**U[-1.5, 1.5] (``explore="around"``).  The paper's own experiment is the actor's limit +-1;
ours spans the range because we have ~10^3 real-time flows, not ~10^5
simulated ones (a critic of Q(s, limit) then has data across the range).

**Start-up** (``startup``, a :class:`~ccswitch.models.lfq_actor.Startup`; none by default): a
flow younger than its seconds keeps its limit, as the router loop does with an actor that has one,
and t_e is drawn in [startup seconds, duration / 2], so the experiments price what the actor
decides after the start-up (docs/network/lfq.md "A start-up limit").

**The scenario space** (``space``, a :class:`ccswitch.testbed.scenario.space.Space`; none by default:
the paper's distribution).  Paper 001's draws are one narrow corner of what a router meets; an actor
trained there sets 3-5 packet limits for the 25-50 Mbit/s WiFi flows of docs/results-network.md.  With
a space, each episode draws the bottleneck rate R log-uniformly in the space's ``rate_mbit`` (b = R / (n + 1),
the fair share of the n flows and the filler), each flow's RTT log-uniformly in its ``rtt.base_ms`` (at
least the link's own BASE_RTT_MS; independent per flow, so the RTTs differ) and its CCA from its ``ccas``
mix (CUBIC, BBR, PCC, Reno as the kernel and ccswitch's BPF PCC run them, the ``linux`` sender), and the
clients' WiFi medium from its ``wifi.profile`` weights (linkemu's shared medium in front of the router, as
the generated scenarios have it: every station at the space's PHY rate, raised until the medium carries
R, without the rate anomaly).  The medium is why: it hands the router a station's packets in aggregates,
so a flow needs buffer for its bursts as well as for its BDP, and the first shipped actor, trained
without one, dropped them (0 of 9 fairness scenarios met).  Per episode, as the generator draws a scenario's
(``shapes=True``, the default with a space), also the lfq uplink's rate shape (constant, step, ramp,
variable, a real trace: :class:`Bottleneck`, R its nominal rate as in the generator, the medium sized for
its peak) and its random loss (none, Bernoulli, Gilbert; mean 0.05-2 %, on the whole uplink); a sample
records both (``bottleneck``, ``loss``) and the flow's fair share over its experiment's span (``share_mbit``:
the uplink's mean rate then over n + 1; b when constant), which the reward clips at and is normalised by.
Not drawn: the space's client counts and churn, the rate anomaly.

**Durations** (with a space): the paper's 3.75..6.25 s, stretched by RTT / ROUND_TRIP_SCALE_MS for RTTs
above 40 ms, so a 100 ms flow lasts 9.4..15.6 s.  A loss-based flow pays for a small buffer in its slow
climb back after each cut, which takes round trips, not seconds: at 60-100 ms the paper's durations are
40-60 round trips, mostly slow start.  (It did not, by itself, teach the actors larger limits for slow
long-RTT flows: docs/network/lfq.md "Durations in round trips, rate shapes and loss".)

The control loop polls linkemu every ``interval_s`` (10 ms, as the router
agent): features, backlog and packets out per flow.  A sample keeps the
flow's handshake RTT as linkemu measured it (``handshake_rtt_s``, its SYN to
its next packet; None if it had none) for actors with RTT inputs.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ccswitch.models.lfq_actor import LOG2_MAX, LOG2_MIN, MTU, Actor, Startup, empty_inputs, observation, reward

if TYPE_CHECKING:
    from ccswitch.testbed.scenario.space import Space

__all__ = ["Bottleneck", "FlowDraw", "LfqEpisodes", "draw_flow", "episode_bottleneck", "episode_loss", "episode_share",
           "episode_wifi"]

FIRST_PORT = 5401
FILLER_LOAD = 1.5
"""The filler's offered UDP load in units of b (docstring): always backlogged at its share."""
DATA_MIN_PKTS = 20
"""A flow counts as the iperf3 data connection once it has this many packets in (the control connection
to the same port sends about ten in a run; the data connection reaches 20 within ~3 RTTs)."""
BASE_RTT_MS = 2.0
"""The link's own RTT in an episode (1 ms each way); a flow's delay line adds the rest of its RTT."""
ROUND_TRIP_SCALE_MS = 40.0
"""Space draws: a flow of RTT above this lasts its drawn duration times RTT / this, so every flow lasts
at least 3.75 s / 40 ms ~ 94 round trips (docstring, "Durations")."""
FILLER_EXTRA_S = 1.5
"""The filler outlasts the longest flow of its episode by this much."""


@dataclass(frozen=True)
class FlowDraw:
    """One flow of paper 001's distribution and its experiment."""

    bandwidth_mbit: float
    rtt_ms: float
    cca: str
    duration_s: float
    t_exp_s: float
    limit_pre: int       # the behaviour limit before t_e (0: the actor's)
    limit_exp: int       # the experiment's limit (0: drawn around the actor's at t_e)


PRE_BDP_OCTAVES = (-2.0, 1.5)
"""``pre="bdp"``: the behaviour limit is the flow's BDP times 2**U[these] (1/4 .. 2.8 BDP), within 1..256."""
EXPLORE_BDP_OCTAVES = (-2.0, 2.0)
"""``explore="bdp"``: the experiment's limit is the flow's BDP times 2**U[these] (1/4 .. 4 BDP), within 1..256."""


def bdp_pkts(bandwidth_mbit: float, rtt_ms: float) -> float:
    """A flow's bandwidth-delay product in MTU packets."""
    return bandwidth_mbit * 1e6 / 8 * rtt_ms / 1e3 / MTU


def _log_uniform_limit(rng: np.random.Generator) -> int:
    return max(1, round(2.0 ** rng.uniform(LOG2_MIN, LOG2_MAX)))


def _around_bdp(rng: np.random.Generator, bdp_pkts: float, octaves: tuple[float, float]) -> int:
    return max(1, min(256, round(bdp_pkts * 2.0 ** rng.uniform(*octaves))))


def _pre_limit(rng: np.random.Generator, pre: str, bdp_pkts: float) -> int:
    """The behaviour limit before t_e (module docstring); 0: the actor sets it."""
    if pre == "random":
        return _log_uniform_limit(rng)
    if pre == "bdp":
        return _around_bdp(rng, bdp_pkts, PRE_BDP_OCTAVES)
    return 0


def _experiment_limit(rng: np.random.Generator, explore: str, bdp_pkts: float) -> int:
    """The experiment's limit (module docstring); 0: drawn around the actor's at t_e."""
    if explore == "uniform":
        return _log_uniform_limit(rng)
    if explore == "bdp":
        return _around_bdp(rng, bdp_pkts, EXPLORE_BDP_OCTAVES)
    return 0


def episode_share(rng: np.random.Generator, flows: int, space: Space | None = None) -> float:
    """An episode's fair share b, Mbit/s: U[5, 25] (the paper's), or the space's bottleneck rate over the
    *flows* and the filler (module docstring)."""
    from ccswitch.testbed.scenario.generate import log_uniform

    if space is None:
        return float(rng.uniform(5.0, 25.0))
    return log_uniform(rng, space.rate_mbit.lo, space.rate_mbit.hi) / (flows + 1)


def episode_wifi(rng: np.random.Generator, space: Space | None, clients: int, rate_mbit: float
                 ) -> tuple[str, dict[str, Any] | None]:
    """The episode's WiFi profile name and linkemu ``wifi`` section (None: wired) for *clients* stations
    sharing a medium that must carry *rate_mbit* (module docstring; the generator's PHY rule)."""
    from ccswitch.testbed.scenario.generate import MAC_EFFICIENCY, MEDIUM_HEADROOM, weighted_choice
    from ccswitch.testbed.scenario.space import WIFI_PROFILES

    if space is None:
        return "none", None
    name = weighted_choice(rng, space.wifi_profile)
    profile = WIFI_PROFILES[name]
    if profile is None:
        return name, None
    phy = float(max(space.phy_rate_mbit, math.ceil(MEDIUM_HEADROOM * rate_mbit / MAC_EFFICIENCY[name])))
    return name, {"clients": [{"phy_rate_mbit": phy}] * clients, **profile}


def _space_rtt_cca(rng: np.random.Generator, space: Space) -> tuple[float, str]:
    """A flow's RTT (ms) and CCA drawn from the scenario space (module docstring)."""
    from ccswitch.testbed.scenario.generate import log_uniform, weighted_choice

    rtt = log_uniform(rng, max(space.rtt_base_ms.lo, BASE_RTT_MS), max(space.rtt_base_ms.hi, BASE_RTT_MS))
    return round(rtt, 2), weighted_choice(rng, space.cca_mix)


def episode_loss(rng: np.random.Generator, space: Space | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An episode's random loss on the lfq uplink (module docstring): the draw as the scenario generator
    records it and linkemu's LOSS object; none without a space."""
    from ccswitch.testbed.scenario.generate import draw_loss, loss_model

    if space is None:
        return {"kind": "none"}, None
    loss = draw_loss(rng, space)
    return loss, loss_model(loss)


@dataclass(frozen=True)
class Bottleneck:
    """An episode's lfq uplink rate: its shape, its LINK fields and, for a trace, the rate of each second."""

    kind: str
    link: dict[str, Any]
    per_second_mbit: list[float] | None = None  # None: constant at link["rate_mbit"]

    def mean_mbit(self, t0: float, t1: float) -> float:
        """The mean rate from *t0* to *t1* seconds (whole seconds of the trace they touch)."""
        if self.per_second_mbit is None:
            return float(self.link["rate_mbit"])
        k0 = min(max(int(t0), 0), len(self.per_second_mbit) - 1)
        k1 = min(max(math.ceil(t1), k0 + 1), len(self.per_second_mbit))
        return float(np.mean(self.per_second_mbit[k0:k1]))


def episode_bottleneck(rng: np.random.Generator, space: Space | None, rate_mbit: float, seconds: float,
                       trace: Path) -> Bottleneck:
    """An episode's rate shape of nominal rate *rate_mbit* over *seconds* (module docstring; as the
    generator's, step and ramp shapes fall below it and variable and real ones move around it): constant,
    or a Mahimahi *trace* written by the scenario generator."""
    from ccswitch.testbed.scenario.generate import draw_bottleneck
    from ccswitch.testbed.scenario.traces import read_trace, write_trace

    if space is None:
        return Bottleneck("constant", {"rate_mbit": rate_mbit})
    kind, profile = draw_bottleneck(rng, space)
    if kind == "constant":
        return Bottleneck(kind, {"rate_mbit": rate_mbit})
    params = {"bottleneck": kind, "profile": profile, "rate_mbit": rate_mbit, "duration_s": seconds}
    per_opportunity = write_trace(params, space, trace)
    per_second = np.bincount(np.asarray(read_trace(trace)) // 1000) * per_opportunity * 8 / 1e6
    return Bottleneck(kind, {"rate_mbit": None, "trace": trace, "trace_bytes_per_opportunity": per_opportunity},
                      per_second.tolist())


def draw_flow(rng: np.random.Generator, bandwidth_mbit: float, *, pre: str = "random",
              explore: str = "uniform", loss_based: str = "cubic", startup: Startup | None = None,
              space: Space | None = None) -> FlowDraw:
    """A flow of the paper's distribution (bandwidth given: the episode's b; *loss_based*: its BIC), or of
    the scenario *space*'s RTTs, CCAs and durations in round trips; its experiment comes after the *startup*
    (module docstring)."""
    duration = float(rng.uniform(3.75, 6.25))
    if space is None:
        rtt = round(float(rng.uniform(5.0, 25.0)), 2)
        cca = str(rng.choice(("reno", loss_based)))
    else:
        rtt, cca = _space_rtt_cca(rng, space)
        duration *= max(1.0, rtt / ROUND_TRIP_SCALE_MS)
    t_exp = round(float(rng.uniform(startup.seconds if startup else 0.0, duration / 2)), 3)
    bdp = bdp_pkts(bandwidth_mbit, rtt)
    return FlowDraw(bandwidth_mbit=round(bandwidth_mbit, 2), rtt_ms=rtt, cca=cca, duration_s=round(duration, 3),
                    t_exp_s=t_exp, limit_pre=_pre_limit(rng, pre, bdp), limit_exp=_experiment_limit(rng, explore, bdp))


@dataclass
class _Track:
    draw: FlowDraw
    client_addr: str
    queue: int | None = None
    t0: float | None = None          # emulator time the flow was first seen
    obs: list[float] | None = None   # features at t_e
    empty: list[float] | None = None  # empty_frac at t_e (lfq_actor.empty_inputs)
    handshake_rtt_s: float | None = None  # linkemu's handshake RTT of the flow at t_e (lfq_actor.rtt_inputs)
    limit_exp: int = 0
    out_at_exp: int = 0
    queue_sum: float = 0.0
    queue_n: int = 0
    out_end: int | None = None
    limit_at_exp_before: int = 0


class LfqEpisodes:
    """Runs training episodes on one topology (module docstring).  Needs root and the linkemu binary."""

    def __init__(self, *, flows_per_run: int = 3, interval_s: float = 0.01, workdir: str | Path | None = None,
                 seed: int = 1, sender: str = "linux", space: Space | None = None, shapes: bool = True) -> None:
        from ccswitch.testbed.runs.tcp_senders import SENDERS

        if space is not None and sender != "linux":
            raise ValueError(f"a scenario space runs its CCAs as the kernel has them: sender 'linux', not {sender!r}")
        self.n = flows_per_run
        self.space = space
        self.shapes = shapes and space is not None  # module docstring: the space's rate shapes and loss
        self.sender = sender
        self.loss_based = SENDERS[sender].loss_based
        self.interval_s = interval_s
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="lfq-env-"))
        self.rng = np.random.default_rng(seed)
        self.episodes = 0
        self._stack = contextlib.ExitStack()
        self._topo: Any = None

    def __enter__(self) -> LfqEpisodes:
        from ccswitch.testbed.runs.topology import Topology

        self._topo = self._stack.enter_context(Topology(self.n + 1))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        self._topo = None

    def episode(self, *, actor: Actor | None = None, pre: str = "random", explore: str = "uniform",
                startup: Startup | None = None) -> list[dict[str, Any]]:
        """One episode; returns one sample per flow that reached its experiment and its end."""
        from ccswitch.testbed.runs.emulator import Emulator, emulator_config, link
        from ccswitch.testbed.runs.iperf import IperfFlow, start_server
        from ccswitch.testbed.runs.linkemu_control import LinkemuControl
        from ccswitch.testbed.runs.tcp_senders import apply_sender
        from ccswitch.testbed.scenario.generate import peak_factor

        assert self._topo is not None, "use LfqEpisodes as a context manager"
        if (pre == "actor" or explore == "around") and actor is None:
            raise ValueError("pre='actor' and explore='around' need an actor")
        topo, rng = self._topo, self.rng
        self.episodes += 1
        b = episode_share(rng, self.n, self.space)
        draws = [draw_flow(rng, b, pre=pre, explore=explore, loss_based=self.loss_based, startup=startup,
                           space=self.space) for _ in range(self.n)]
        tracks = [_Track(d, topo.client_addrs[i]) for i, d in enumerate(draws)]
        sock = self.workdir / "linkemu.sock"
        rate = b * (self.n + 1)
        seconds = max(d.duration_s for d in draws) + FILLER_EXTRA_S
        shaped = self.space if self.shapes else None  # no space, or shapes=False: constant and lossless
        shape = episode_bottleneck(rng, shaped, rate, seconds, self.workdir / "uplink.trace")
        medium, wifi = episode_wifi(rng, self.space, self.n + 1, rate * peak_factor(shape.kind))
        loss, loss_link = episode_loss(rng, shaped)
        cfg = emulator_config(
            topo.client_ifs, topo.server_if, seed=self.episodes, interval_ms=1000,
            uplink=link(delay_ms=BASE_RTT_MS / 2, qdisc={"kind": "lfq"}, loss=loss_link, **shape.link),
            downlink=link(rate, BASE_RTT_MS / 2, limit_pkts=1000), wifi=wifi,
            client_delay_ms=[max(d.rtt_ms - BASE_RTT_MS, 0.0) for d in draws] + [0.0],
            control={"socket": str(sock)})
        with contextlib.ExitStack() as ep:
            ep.enter_context(Emulator(topo.router, cfg, stats_dir=self.workdir / "emulator"))
            ctl = ep.enter_context(LinkemuControl(sock, connect_timeout=5.0))
            for i in range(self.n + 1):
                ep.enter_context(start_server(topo.server, FIRST_PORT + i, bind=topo.server_addr))
            # The filler (docstring): UDP at FILLER_LOAD x b (x the peak of a rate shape) from the last client,
            # longer than every flow.
            ep.enter_context(IperfFlow(topo.clients[self.n], topo.server_addr, FIRST_PORT + self.n, udp=True,
                                       bitrate=FILLER_LOAD * b * peak_factor(shape.kind) * 1e6,
                                       seconds=seconds, interval=1.0))
            for i, d in enumerate(draws):
                apply_sender(topo.clients[i], self.sender, d.cca)  # one flow per client: SACK per CCA
                ep.enter_context(IperfFlow(topo.clients[i], topo.server_addr, FIRST_PORT + i, cca=d.cca,
                                           seconds=d.duration_s, interval=1.0))
            self._loop(ctl, tracks, actor, startup)
        # A flow's fair share over its experiment's span: the uplink's mean rate then over the n + 1 senders
        # (the filler always backlogged); b itself when the rate is constant.
        return [self._sample(t, shape.mean_mbit(t.draw.t_exp_s, t.draw.duration_s) / (self.n + 1), startup, medium,
                             loss, shape.kind) for t in tracks if t.obs is not None and t.out_end is not None]

    def _loop(self, ctl: Any, tracks: list[_Track], actor: Actor | None, startup: Startup | None) -> None:
        deadline = time.monotonic() + max(t.draw.duration_s for t in tracks) + 3.0
        next_t = time.monotonic()
        while time.monotonic() < deadline and any(t.out_end is None for t in tracks):
            st = ctl.state("uplink", fields=("flows",))
            now = float(st["t_s"])
            flows = st["uplink"].get("flows") or []
            changes: list[dict[str, int]] = []
            for t in tracks:
                f = _data_flow(flows, t.client_addr, FIRST_PORT + tracks.index(t))
                if f is None or t.out_end is not None:
                    continue
                if t.t0 is None:
                    t.t0, t.queue = now, int(f["queue"])
                age = float(f.get("age_s", now - t.t0))
                if age >= t.draw.duration_s:
                    t.out_end = int(f["packets_out"])
                    continue
                if t.obs is None and age >= t.draw.t_exp_s:
                    t.obs = observation(f.get("features") or {}).tolist()
                    t.empty = empty_inputs(f.get("features") or {}).tolist()
                    rtt = f.get("handshake_rtt_s")
                    t.handshake_rtt_s = None if rtt is None else float(rtt)
                    t.out_at_exp = int(f["packets_out"])
                    t.limit_at_exp_before = int(f["limit_pkts"])
                    lim = t.draw.limit_exp
                    if lim == 0:
                        assert actor is not None
                        base = actor.limits_of([f])[0]
                        lim = max(1, min(256, round(base * 2.0 ** self.rng.uniform(-1.5, 1.5))))
                    t.limit_exp = lim
                    want = lim
                elif t.obs is not None:
                    t.queue_sum += float(f["backlog_pkts"])
                    t.queue_n += 1
                    want = t.limit_exp
                elif startup is not None and age < startup.seconds:
                    want = startup.limit_pkts
                elif t.draw.limit_pre:
                    want = t.draw.limit_pre
                else:
                    assert actor is not None
                    want = actor.limits_of([f])[0]
                if want != int(f["limit_pkts"]):
                    changes.append({"queue": int(f["queue"]), "limit_pkts": int(want)})
            if changes:
                with contextlib.suppress(Exception):  # a flow that just ended: the next state says so
                    ctl.set("uplink", flows=changes)
            next_t += self.interval_s
            time.sleep(max(next_t - time.monotonic(), 0.0))

    def _sample(self, t: _Track, b_mbit: float, startup: Startup | None, medium: str,
                loss: dict[str, Any], shape: str) -> dict[str, Any]:
        d = t.draw
        span = max(d.duration_s - d.t_exp_s, 1e-3)
        assert t.out_end is not None
        thr = (t.out_end - t.out_at_exp) * MTU / span  # bytes/s
        thr = min(thr, b_mbit * 1e6 / 8)  # a neighbour's idle share is not this limit's merit (docstring)
        q = t.queue_sum / t.queue_n if t.queue_n else 0.0
        return {"draw": asdict(d), "obs": [round(x, 6) for x in t.obs or []],
                "empty": [round(x, 6) for x in t.empty or []],
                "handshake_rtt_s": None if t.handshake_rtt_s is None else round(t.handshake_rtt_s, 6),
                "limit_exp": t.limit_exp,
                "limit_before": t.limit_at_exp_before, "throughput_mbit": round(thr * 8 / 1e6, 4),
                "mean_queue_pkts": round(q, 3), "reward": round(reward(thr, q), 5),
                "bdp_pkts": round(bdp_pkts(b_mbit, d.rtt_ms), 3), "episode": self.episodes,
                "share_mbit": round(b_mbit, 4),
                "sender": self.sender, "startup": startup.as_dict() if startup else None,
                "space": self.space.name if self.space is not None else None,
                "wifi": medium if self.space is not None else None,
                "loss": loss if self.space is not None else None,
                "bottleneck": shape if self.space is not None else None,
                "t": time.time()}


def _data_flow(flows: list[dict[str, Any]], src: str, dport: int) -> dict[str, Any] | None:
    """The iperf3 data connection of client *src* to *dport*: of that 5-tuple family the one with most
    packets, once it has DATA_MIN_PKTS (iperf3's control connection to the same port carries a few)."""
    best = None
    for f in flows:
        k = f.get("key") or {}
        n = f.get("packets_in", 0)
        if (k.get("src") == src and k.get("dport") == dport and k.get("proto") == 6 and n >= DATA_MIN_PKTS
                and (best is None or n > best.get("packets_in", 0))):
            best = f
    return best

