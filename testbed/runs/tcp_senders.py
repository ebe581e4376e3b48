"""Sender profiles for paper 001's single-flow runs: how the client namespace's TCP is set up.

Paper 001 runs NewReno and BIC in ns-3 and does not say how its TCP was
configured.  Linux differs from a simulator's TCP in two ways that move the
paper's numbers (docs/network/lfq.md, "The paper's sender"): SACK (with it, a
slow-start overshoot is repaired in about one RTT; without, NewReno's
one-hole-per-RTT recovery, RFC 6582) and the loss-based CCA (these kernels
have CUBIC, whose HyStart leaves slow start early, and no ``tcp_bic``: ccswitch
registers its BPF BIC, bpf/bic.bpf.c).  A profile fixes both:

* ``linux``: the namespace as it comes (SACK on; CUBIC stands in for BIC);
* ``no-sack``: SACK off for every flow;
* ``bic`` / ``no-sack-bic``: the paper's BIC, SACK on / off;
* ``bic-classic-sack``: BIC, SACK, losses found only by duplicate ACKs and
  timeouts (no RACK, no tail-loss probe), as simulators' SACK senders do;
* ``no-sack-reno-bic``: NewReno without SACK, BIC with it (the profile that
  reproduces 8 of 9 of the paper's baseline numbers).

SACK is a per-namespace sysctl, so a profile that differs per CCA needs one
flow per client namespace; :func:`apply_sender` sets a client's sysctls for
the CCA its next flow runs.  Used by the reproduction
(``testbed/lfq_reproduction.py``) and by LFQ's training episodes
(``envs/lfq_env.py``).
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple


class Sender(NamedTuple):
    """A sender profile: sysctls of the client namespace for a Reno flow and for a flow of the paper's
    BIC (set before every flow), and the CCA that runs the paper's BIC."""

    reno: dict[str, str]
    other: dict[str, str]
    loss_based: str


SACK = {"net.ipv4.tcp_sack": "1"}  # the namespace's default
NO_SACK = {"net.ipv4.tcp_sack": "0"}  # the client offers no SACK: NewReno loss recovery
CLASSIC_SACK = {**SACK, "net.ipv4.tcp_recovery": "0", "net.ipv4.tcp_early_retrans": "0"}
SENDERS: dict[str, Sender] = {
    "linux": Sender(SACK, SACK, "cubic"),
    "no-sack": Sender(NO_SACK, NO_SACK, "cubic"),
    "bic": Sender(SACK, SACK, "bic"),
    "no-sack-bic": Sender(NO_SACK, NO_SACK, "bic"),
    # SACK, but loss found only by duplicate ACKs and timeouts (RFC 6675 style): no RACK, no tail-loss probe
    "bic-classic-sack": Sender(CLASSIC_SACK, CLASSIC_SACK, "bic"),
    # NewReno without SACK, BIC with it: the reading of the paper's numbers in docs/network/lfq.md
    "no-sack-reno-bic": Sender(NO_SACK, SACK, "bic"),
}
"""Sender profiles (``--sender``).  A draw's "cubic" is the paper's BIC."""


def run_cca(draw_cca: str, sender: str) -> str:
    """The CCA a draw's flow runs under *sender*: Reno stays Reno, the paper's BIC is CUBIC or BIC."""
    return draw_cca if draw_cca == "reno" else SENDERS[sender].loss_based


def held_loss_based(sender: str) -> contextlib.AbstractContextManager[object]:
    """Keep the profile's loss-based CCA registered while the context lasts: ccswitch's BPF BIC (its
    holder unregisters it after the last user), nothing for the kernel's CUBIC."""
    if SENDERS[sender].loss_based != "bic":
        return contextlib.nullcontext()
    from ccswitch.bpf.bic import ensure_bic

    return ensure_bic()


def sender_sysctls(sender: str, draw_cca: str) -> dict[str, str]:
    """The client namespace's sysctls for a flow of *draw_cca* ("reno", or "cubic"/"bic": the paper's BIC)."""
    profile = SENDERS[sender]
    return profile.reno if draw_cca == "reno" else profile.other


def apply_sender(netns: str, sender: str, draw_cca: str) -> None:
    """Set *netns*'s TCP for the next flow (one ``sysctl`` call, ~10 ms)."""
    from .netns_processes import run_in

    args = [f"{key}={value}" for key, value in sender_sysctls(sender, draw_cca).items()]
    run_in(netns, ["sysctl", "-qw", *args])
