"""ccswitchd, the switching daemon: monitor -> features -> policy -> guard -> switch (docs/daemon.md).

Modules, one job each: config (schema, defaults, validation), controller
(one tick; the Controller's other jobs in controller_proposals, _overrides,
_state, _views, _stats), guard (dwell, hysteresis, cap, post-switch
evaluation), policies (DQN, heuristic, static, observe), aggregate (ticks ->
decision intervals), unfairness (Thratio/Jain per path, reward), selection
(which flows), recorder (--record Parquet, --decisions JSONL), protocol +
server (control socket), sdnotify, logs, metrics (Prometheus), explain,
install, main.
"""
