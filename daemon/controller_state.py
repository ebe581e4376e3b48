"""The Controller's state file: the guard's per-flow state and recent history, saved when it changes and
loaded at start, so a restarted daemon neither forgets nor repeats a switch.

A mixin of controller.Controller (state_path, guard, history, clock, _dirty).
"""

from __future__ import annotations

import json
import logging
import os

log = logging.getLogger("ccswitchd")


class ControllerState:
    # ------------------------------------------------------------- state
    def save_state(self) -> None:
        self._dirty = False
        if not self.state_path:
            return
        doc = {"version": 1, "saved": self.clock(), "pid": os.getpid(), "flows": self.guard.to_state(),
               "history": list(self.history)[-200:]}
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(doc))
            tmp.replace(self.state_path)
        except OSError as e:
            log.warning("state not saved", extra={"fields": {"path": str(self.state_path), "error": e.strerror}})

    def load_state(self) -> None:
        if not self.state_path or not self.state_path.exists():
            return
        try:
            doc = json.loads(self.state_path.read_text())
            n = self.guard.from_state(doc.get("flows", {}))
            for h in doc.get("history", []):
                self.history.append(h)
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("state file ignored", extra={"fields": {"path": str(self.state_path), "error": str(e)}})
            return
        log.info("state restored", extra={"fields": {"path": str(self.state_path), "flows": n,
                                                      "previous_pid": doc.get("pid")}})
