"""Issue 10: the committed dev and test splits are what the generator writes today for their seed.

testbed/scenarios/matrix/README.md gives the commands that made them; this test reads those
commands back, runs each through the CLI's ``matrix generate`` into a temporary folder and
compares the result byte for byte with the committed folder (scenario files, traces and
index.csv: the index holds no timestamp or output path, so nothing is left out).  A change
of the generator that draws or writes anything differently for a given seed fails here; such
a change has to bump GENERATOR_VERSION and regenerate the splits on purpose.  Both splits
take about 2 s together."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from ccswitch.cli_matrix import matrix

REPO = Path(__file__).resolve().parents[1]
MATRIX = REPO / "testbed" / "scenarios" / "matrix"
GENERATE = re.compile(r"^ccswitch testbed matrix generate .*$", re.MULTILINE)


def _readme_commands() -> dict[str, list[str]]:
    """split -> the arguments after ``ccswitch testbed matrix`` of the README's generate command."""
    out = {}
    for line in GENERATE.findall((MATRIX / "README.md").read_text()):
        args = shlex.split(line)[3:]
        out[args[args.index("--split") + 1]] = args
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_committed_splits_regenerate_identically(tmp_path: Path) -> None:
    commands = _readme_commands()
    assert sorted(commands) == ["dev", "test"], "README.md must give the generate command of dev and test"
    for split, args in commands.items():
        committed = REPO / args[args.index("--out") + 1]
        assert committed == MATRIX / split
        out = tmp_path / split
        args = list(args)
        args[1] = str(REPO / args[1])  # SPACE.toml, relative to the repository in the README
        args[args.index("--out") + 1] = str(out)
        res = CliRunner().invoke(matrix, args)
        assert res.exit_code == 0, res.output
        new, old = _files(out), _files(committed)
        assert sorted(new) == sorted(old), f"{split}: other files than the committed ones"
        changed = [name for name in old if new[name] != old[name]]
        assert not changed, f"{split}: regenerated files differ from the committed ones: {changed[:5]}"
