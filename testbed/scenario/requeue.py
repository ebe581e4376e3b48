"""A scenario folder behind another router queue: "what if the bottleneck ran Q instead".

    ccswitch testbed matrix requeue testbed/scenarios/matrix/dev --queue fq_codel --out results/dev-fq_codel
    ccswitch testbed matrix run results/dev-fq_codel --arms static,dqn --out results/matrix-dev-fq_codel

Every scenario's ``[link.uplink]`` is the clients' bottleneck (the router's queue towards
the server: the direction the flows send).  ``requeue`` copies a folder of scenario files
(a generated split with its ``traces/`` and ``index.csv``, or any folder) with that
direction's ``qdisc`` line replaced and nothing else changed: same names, rates, delays,
loss, WiFi medium, flows and daemon, so a matrix run of the copy sits beside the
original's run scenario by scenario (issue 13: host switching against router queues on
the generated dev split).  The scenario's own queue (pfifo of 0.25-4 BDP, CoDel, DualPI2)
is part of the condition that is replaced: the copy asks what a user who changes the
router gets, not what the same path would do.

A vdq_csaqm queue on a trace-driven uplink gets ``rate_mbit`` = the trace's mean rate
(its virtual queues need a capacity; what an operator would provision), and a dualpi2
queue with an agent ``agent_rate_mbit`` = the same (the agent's utilisation reference).

The replacement is textual (TOML has no round-trip writer in the standard library and
the files' comments are documentation), so each result is read back through the
scenario parser before anything is written; a folder whose files do not parse is refused
whole, and an existing OUT is only reused when it holds the same result (a resumed
matrix then keeps meaning the same thing).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from .model import ScenarioError
from .parse import parse_scenario

SECTION = re.compile(r"^\s*\[")
QDISC_LINE = re.compile(r"^(\s*qdisc\s*=\s*)(\{[^\n]*\})(.*)$")


def with_uplink_qdisc(text: str, qdisc: str, where: str = "scenario") -> str:
    """*text* with its ``[link.uplink]`` qdisc replaced by the inline table *qdisc*.

    A file whose uplink has no qdisc line (linkemu's default queue) gets one after the
    section header; the file's first line then records the change."""
    lines = text.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.strip().split("#")[0].strip() == "[link.uplink]")
    except StopIteration:
        raise ScenarioError(f"{where}: no [link.uplink] table (requeue replaces that direction's queue)") from None
    end = next((i for i in range(start + 1, len(lines)) if SECTION.match(lines[i])), len(lines))
    old = "(linkemu's default)"
    for i in range(start + 1, end):
        m = QDISC_LINE.match(lines[i])
        if m:
            old = m.group(2)
            lines[i] = f"{m.group(1)}{qdisc}"
            break
    else:
        lines.insert(start + 1, f"qdisc = {qdisc}")
    note = f"# Router queue replaced by `ccswitch testbed matrix requeue`: uplink qdisc {qdisc} (was {old})."
    return "\n".join([note, *lines])


VDQ_KIND = re.compile(r'kind\s*=\s*"vdq_csaqm"')
DUALPI2_AGENT = re.compile(r'kind\s*=\s*"dualpi2".*\bagent\s*=')


def _with_capacity(qdisc: str, f: Path, folder: Path) -> str:
    """*qdisc* on a trace-driven uplink with no rate: the trace's mean rate as the queue's capacity.

    VDQ-CSAQM's virtual queues drain at the capacity C the operator configures (``rate_mbit``);
    on a link whose capacity follows a trace there is no one right C, and the trace's mean rate
    is what an operator would provision (the queue then marks late while the trace is below
    its mean and early above it: part of what the comparison measures).  DualPI2's A3C agent
    measures utilisation against a capacity (``agent_rate_mbit``), the same mean.  Other
    queues need no rate."""
    if VDQ_KIND.search(qdisc) and "rate_mbit" not in qdisc:
        key = "rate_mbit"
    elif DUALPI2_AGENT.search(qdisc) and "agent_rate_mbit" not in qdisc:
        key = "agent_rate_mbit"
    else:
        return qdisc
    try:
        up = parse_scenario(f.read_text(), f.name, base_dir=folder.resolve(), source=f).link.uplink
    except ScenarioError:
        return qdisc  # the caller reports the file's own error
    if up.rate_mbit is not None or up.trace is None:
        return qdisc
    ms = [int(x) for x in Path(up.trace).read_text().split()]
    per_opp = up.trace_bytes_per_opportunity or 1500
    mean_mbit = len(ms) * per_opp * 8 / (max(ms[-1], 1) / 1000) / 1e6 if ms else 0.0
    return qdisc.rstrip()[:-1].rstrip() + f", {key} = {max(mean_mbit, 0.1):.1f} }}"


def requeue(folder: Path, qdisc: str, out: Path) -> list[Path]:
    """Copy the scenario files of *folder* into *out* with the uplink qdisc *qdisc*; returns the files.

    Raises ScenarioError (one line) for a folder without scenario files, a result that does
    not parse (e.g. a bad *qdisc*), or an *out* that holds other content."""
    files = sorted(folder.glob("*.toml"))
    if not files:
        raise ScenarioError(f"{folder}: no scenario files (*.toml) to requeue")
    if folder.resolve() == out.resolve():
        raise ScenarioError(f"--out {out} is the source folder; give a new folder")
    texts: dict[str, str] = {}
    for f in files:
        text = with_uplink_qdisc(f.read_text(), _with_capacity(qdisc, f, folder), f.name)
        try:
            parse_scenario(text, f"{f.name} with uplink qdisc {qdisc}", base_dir=folder.resolve(), source=f)
        except ScenarioError as e:
            raise ScenarioError(f"requeue: {e}") from None
        texts[f.name] = text
    if out.exists():
        clash = [n for n, t in texts.items() if (out / n).is_file() and (out / n).read_text() != t]
        if clash:
            raise ScenarioError(f"--out {out} already holds {clash[0]} with another queue or content; "
                                "give a new folder or delete it")
    out.mkdir(parents=True, exist_ok=True)
    for extra in ("traces", "index.csv"):  # trace files are named relative to the scenario file
        src = folder / extra
        if src.is_dir():
            shutil.copytree(src, out / extra, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, out / extra)
    written = []
    for name, text in texts.items():
        (out / name).write_text(text)
        written.append(out / name)
    return written
