"""Reading a TOML table with typed getters: the one validator of scenario and space files.

Every mistake raises :class:`ScenarioError` with one line ``WHERE: PATH: MESSAGE``
(e.g. ``s.toml: flows[1].cca: unknown congestion control 'vegas' (...)``);
:meth:`Table.done` rejects keys nobody asked for, listing the known ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .model import ScenarioError


class Table:
    """A TOML table being read: typed getters, unknown-key check, error paths."""

    def __init__(self, data: Any, path: str, err: Err) -> None:
        self.path = path
        self.err = err
        if not isinstance(data, dict):
            err(path, f"must be a table, got {tname(data)}")
        self.data: dict[str, Any] = data
        self.used: set[str] = set()

    def here(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.data.get(key, default)

    def number(self, key: str, default: float | None = None, *, required: bool = False,
               lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> float | None:
        if key not in self.data:
            if required:
                self.err(self.here(key), "missing (a number is required)")
            self.used.add(key)
            return default
        v = self.raw(key)
        if isinstance(v, bool) or not isinstance(v, int | float):
            self.err(self.here(key), f"must be a number, got {tname(v)} {v!r}")
        v = float(v)
        if v != v or v in (float("inf"), float("-inf")):
            self.err(self.here(key), f"must be a finite number, got {v}")
        if lo is not None and (v <= lo if lo_open else v < lo):
            self.err(self.here(key), f"must be {'>' if lo_open else '>='} {lo:g}, got {v:g}")
        if hi is not None and v > hi:
            self.err(self.here(key), f"must be <= {hi:g}, got {v:g}")
        return v

    def integer(self, key: str, default: int | None = None, *, required: bool = False,
                lo: int | None = None, hi: int | None = None) -> int | None:
        if key not in self.data:
            if required:
                self.err(self.here(key), "missing (an integer is required)")
            self.used.add(key)
            return default
        v = self.raw(key)
        if isinstance(v, bool) or not isinstance(v, int):
            self.err(self.here(key), f"must be an integer, got {tname(v)} {v!r}")
        if lo is not None and v < lo:
            self.err(self.here(key), f"must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            self.err(self.here(key), f"must be <= {hi}, got {v}")
        return int(v)

    def string(self, key: str, default: str | None = None, *, required: bool = False,
               choices: Iterable[str] | None = None) -> str | None:
        if key not in self.data:
            if required:
                self.err(self.here(key), "missing (a string is required)")
            self.used.add(key)
            return default
        v = self.raw(key)
        if not isinstance(v, str):
            self.err(self.here(key), f"must be a string, got {tname(v)} {v!r}")
        if choices is not None:
            opts = list(choices)
            if v not in opts:
                self.err(self.here(key), f"unknown value {v!r} (use one of: {', '.join(opts)})")
        return v

    def boolean(self, key: str, default: bool) -> bool:
        if key not in self.data:
            self.used.add(key)
            return default
        v = self.raw(key)
        if not isinstance(v, bool):
            self.err(self.here(key), f"must be true or false, got {tname(v)} {v!r}")
        return v

    def table(self, key: str) -> Table | None:
        if key not in self.data:
            self.used.add(key)
            return None
        return Table(self.raw(key), self.here(key), self.err)

    def array(self, key: str) -> list[Any]:
        if key not in self.data:
            self.used.add(key)
            return []
        v = self.raw(key)
        if not isinstance(v, list):
            self.err(self.here(key), f"must be an array, got {tname(v)}")
        return v

    def done(self) -> None:
        """Error on the first key nobody asked for."""
        for key in self.data:
            if key not in self.used:
                known = sorted(self.used)
                self.err(self.here(key), f"unknown field (expected one of: {', '.join(known)})")


class Err:
    def __init__(self, where: str) -> None:
        self.where = where

    def __call__(self, path: str, msg: str) -> Any:
        raise ScenarioError(f"{self.where}: {path}: {msg}" if path else f"{self.where}: {msg}")


def tname(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "table"}.get(type(v), type(v).__name__)


def read_file(path: Path, hint: str = "") -> str:
    """A scenario or space file's text, or one ScenarioError line (missing, unreadable)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such file" + (f" ({hint})" if hint else "")) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{path}: cannot read: {e}") from None
