"""The policy file: a trained Q-network that runs with numpy alone (the daemon's side).

One JSON document (``.json``; readable by anything, diffable, no pickles)::

    {
      "format": "ccswitch-policy",
      "version": 1,                                # POLICY_VERSION; loaders refuse others
      "actions": ["cubic", "bbr", "pcc"],          # output i = Q-value of actions[i]
      "features": {"version": 1, "window": 4, "interval_s": 1.0,
                   "names": [... 30 names, ccswitch.envs.features.feature_names() ...]},
      "normalisation": {"mean": [6], "std": [6], "clip": 10.0, "features": [6 base names]},
      "network": {"activation": "relu",            # hidden layers; the output layer is linear
                  "layers": [{"kernel": ARRAY, "bias": ARRAY}, ...]},
      "training": {...},                           # corpus, split, hyperparameters, reward, metrics, versions
      "evaluation": {...},                         # optional: end-to-end results added after training
                                                   # (annotate_policy; e.g. the test split of the space)
      "checksum": "sha256:<hex>"                   # of the canonical JSON of everything else
    }

    ARRAY = {"shape": [rows, cols], "dtype": "<f4", "data": "<base64 of the little-endian bytes>"}

The canonical JSON is ``json.dumps(doc_without_checksum, sort_keys=True,
separators=(",", ":"), ensure_ascii=True)``.  Kernels are (inputs, outputs):
``q = relu(relu(x @ K0 + b0) @ K1 + b1) @ K2 + b2`` for the default 64-64 net.

:func:`load_policy` checks, in this order, and fails with one line naming the
file: JSON, format, version, checksum, then structure (layer shapes chain,
the feature count matches the first layer and this ccswitch's feature list,
the action count matches the last layer).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccswitch.envs.features import BASE_FEATURES, FEATURE_VERSION, Normalisation, feature_names

__all__ = ["DEFAULT_POLICY", "FORMAT", "POLICY_VERSION", "Policy", "PolicyError", "canonical_json", "decode_array",
           "document_checksum", "encode_array", "load_policy", "save_policy", "write_signed"]

FORMAT = "ccswitch-policy"
POLICY_VERSION = 1
DEFAULT_POLICY = Path(__file__).resolve().parent / "policy.json"
"""The trained policy shipped in the repository (models/policy.json, MODEL_CARD.md)."""
ACTIVATIONS = ("relu", "tanh", "linear")


class PolicyError(ValueError):
    """A policy file is unreadable, of another version, corrupt or does not fit this ccswitch."""


def canonical_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def document_checksum(doc: Mapping[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()


def write_signed(path: str | Path, doc: dict[str, Any]) -> str:
    """Sign *doc* (its ``checksum`` key) and write it to *path* atomically; returns the checksum.

    One writer for every checksummed model document (policy files, agent files; :func:`read_signed` reads them)."""
    doc["checksum"] = document_checksum(doc)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n")
    tmp.replace(p)
    return str(doc["checksum"])


def read_signed(path: str | Path, *, fmt: str, version: int, what: str, hint: str,
                error: type[ValueError], article: str = "a") -> dict[str, Any]:
    """Read a document written by :func:`write_signed` and check its format, version and checksum.

    The one reader of every checksummed model file but the policy file (DualPI2, LFQ and RL-TCP
    agents): each problem raises *error* with one line naming the file and the fix; *what* names
    the kind of file ("DualPI2 actor", with its *article*), *hint* says where a good one comes from."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise error(f"{p}: no such {what} file ({hint})") from None
    except OSError as e:
        raise error(f"{p}: cannot read the {what} file ({e.strerror or e})") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise error(f"{p}: not a readable {what} file (invalid JSON: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise error(f"{p}: not {article} {what} file (key 'format' must be {fmt!r})")
    if doc.get("version") != version:
        raise error(f"{p}: {what} file version {doc.get('version')!r} is not supported (this ccswitch reads "
                    f"{version}); export it again")
    try:
        want, got = doc.get("checksum"), document_checksum(doc)
    except ValueError as e:  # NaN or Infinity somewhere: JSON allows them on read, the canonical form does not
        raise error(f"{p}: not a valid {what} file ({e})") from None
    if want != got:
        raise error(f"{p}: checksum mismatch (file says {want}, content hashes to {got}): the file is corrupt or "
                    "was edited")
    return doc


def encode_array(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a, dtype="<f4")
    return {"shape": list(a.shape), "dtype": "<f4", "data": base64.b64encode(a.tobytes()).decode("ascii")}


def encode_layers(kernels: Sequence[np.ndarray], biases: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """A dense network's layers as a model document holds them (``network.layers``)."""
    return [{"kernel": encode_array(k), "bias": encode_array(b)} for k, b in zip(kernels, biases, strict=True)]


def plain_json(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """*record* as plain JSON values (anything else as its str()), for a document's free-form keys."""
    return json.loads(json.dumps(dict(record or {}), default=str))


def decode_array(d: Any, where: str) -> np.ndarray:
    if not isinstance(d, dict) or not {"shape", "dtype", "data"} <= set(d):
        raise PolicyError(f"{where}: must be an object with shape, dtype and data")
    if d["dtype"] != "<f4":
        raise PolicyError(f"{where}: dtype {d['dtype']!r} is not supported (\"<f4\")")
    try:
        raw = base64.b64decode(d["data"], validate=True)
        shape = tuple(int(x) for x in d["shape"])
    except (ValueError, TypeError) as e:
        raise PolicyError(f"{where}: bad data ({e})") from None
    if len(raw) != 4 * int(np.prod(shape)):
        raise PolicyError(f"{where}: {len(raw)} bytes of data for shape {list(shape)}")
    return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)


def _argmax_rows(q: np.ndarray) -> np.ndarray:
    """np.argmax(q, axis=1) (ties: the lowest index) for q [N, A]: column against column, as numpy's
    argmax loops slowly over a short trailing axis.  With NaN (argmax picks the first) numpy decides."""
    if q.ndim != 2 or q.shape[1] < 2 or np.isnan(q).any():
        return np.argmax(q, axis=-1)
    best, idx = np.maximum(q[:, 0], q[:, 1]), (q[:, 1] > q[:, 0]).astype(np.intp)
    for j in range(2, q.shape[1]):
        col = q[:, j]
        np.maximum(idx, (col > best) * j, out=idx)  # j where col beats 0 .. j - 1: branch-free, unlike np.where
        np.maximum(best, col, out=best)
    return idx


class _Scratch(threading.local):
    """Per-thread buffers of Policy.q_values, reused across calls; not pickled or copied.

    At 10,000 rows, allocating (and faulting in) 2.5 MB per hidden layer cost about as much as its GEMM,
    and numpy broadcasting a bias over rows, or np.maximum against a scalar 0, run several times slower
    than on operands of the same shape: the bias and zeros are tiled to BLOCK rows once."""

    MAX_ROWS = 65_536  # larger batches (offline evaluation) allocate: no 16 MB per layer kept for good
    BLOCK = 512  # rows per block of the bias + activation passes (the block stays in cache between them)

    def __init__(self) -> None:
        self.buffers: dict[int, np.ndarray] = {}
        self.tiles: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __reduce__(self) -> tuple[type[_Scratch], tuple[()]]:
        return _Scratch, ()

    def buffer(self, layer: int, rows: int, cols: int) -> np.ndarray:
        """A float32 [rows, cols] array (contents undefined), valid until the next call for this layer."""
        if rows > self.MAX_ROWS:
            return np.empty((rows, cols), np.float32)
        buf = self.buffers.get(layer)
        if buf is None or buf.shape[1] != cols or len(buf) < rows:
            buf = self.buffers[layer] = np.empty((max(rows, 64), cols), np.float32)
        return buf[:rows]

    def add_bias(self, layer: int, x: np.ndarray, b: np.ndarray, relu: bool) -> None:
        """``x += b``, then ``np.maximum(x, 0.0, out=x)`` if *relu*, in place on x [rows, len(b)]: the same
        arithmetic, element by element, in blocks of BLOCK rows against same-shape operands."""
        tile = self.tiles.get(layer)
        if tile is None or tile[0].shape[1] != len(b) or tile[0].dtype != b.dtype or not np.array_equal(tile[0][0], b):
            tile = self.tiles[layer] = (np.tile(b, (self.BLOCK, 1)), np.zeros((self.BLOCK, len(b)), b.dtype))
        bias, zeros = tile
        for start in range(0, len(x), self.BLOCK):
            block = x[start:start + self.BLOCK]
            block += bias[:len(block)]
            if relu:
                np.maximum(block, zeros[:len(block)], out=block)


@dataclass
class Policy:
    """A loaded policy: batched numpy forward pass over observation rows."""

    actions: tuple[str, ...]
    feature_names: tuple[str, ...]
    normalisation: Normalisation
    kernels: list[np.ndarray]
    biases: list[np.ndarray]
    activation: str = "relu"
    window: int = 4
    interval_s: float = 1.0
    training: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)
    """End-to-end results recorded after training (annotate_policy), e.g. the test split's numbers."""
    path: Path | None = None
    checksum: str = ""
    _scratch: _Scratch = field(default_factory=_Scratch, init=False, repr=False, compare=False)

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q-values [N, n_actions] (float32) for observations [N, n_features] (or one [n_features])."""
        x = np.asarray(obs, dtype=np.float32)
        single = x.ndim == 1
        if single:
            x = x[None]
        if x.shape[-1] != self.n_features:
            raise PolicyError(f"observation has {x.shape[-1]} features, the policy takes {self.n_features}")
        n, last = len(x), len(self.kernels) - 1
        for i, (k, b) in enumerate(zip(self.kernels, self.biases, strict=True)):
            hidden = i < last
            # the whole batch in one GEMM, as x @ k (a batch split into blocks rounds differently); float32
            # rows: hidden outputs in reused buffers, bias (and ReLU) in cache-sized blocks
            plain = x.ndim == 2 and x.dtype == k.dtype == b.dtype == np.float32
            x = np.matmul(x, k, out=self._scratch.buffer(i, n, k.shape[1]) if plain and hidden else None)
            if plain:
                self._scratch.add_bias(i, x, b, relu=hidden and self.activation == "relu")
            else:
                x += b
                if hidden and self.activation == "relu":
                    np.maximum(x, 0.0, out=x)
            if hidden and self.activation == "tanh":
                np.tanh(x, out=x)
        return x[0] if single else x

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Greedy action indices [N] (argmax Q; ties: the lowest index)."""
        return _argmax_rows(self.q_values(obs))

    def decide(self, obs: np.ndarray) -> list[str]:
        """Greedy CCA names for a batch of observations."""
        return np.array(self.actions, dtype=object).take(np.atleast_1d(self.act(obs))).tolist()


def save_policy(path: str | Path, *, kernels: Sequence[np.ndarray], biases: Sequence[np.ndarray],
                actions: Sequence[str], features: Sequence[str], normalisation: Normalisation,
                activation: str = "relu", window: int = 4, interval_s: float = 1.0,
                feature_version: int = FEATURE_VERSION, training: Mapping[str, Any] | None = None) -> str:
    """Write a policy file; returns its checksum."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": POLICY_VERSION,
        "actions": list(actions),
        "features": {"version": feature_version, "window": window, "interval_s": interval_s,
                     "names": list(features)},
        "normalisation": normalisation.as_dict(),
        "network": {"activation": activation,
                    "layers": encode_layers(kernels, biases)},
        "training": json.loads(json.dumps(dict(training or {}), default=_jsonable)),
    }
    return write_signed(path, doc)


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path | tuple):
        return str(o) if isinstance(o, Path) else list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def load_policy(path: str | Path | None = None, *, expect_features: Sequence[str] | None = None) -> Policy:
    """Load and check a policy file (default: the shipped models/policy.json).

    *expect_features*: the feature list this caller builds (default: this
    ccswitch's ``feature_names()`` for the file's window and actions).
    """
    p = Path(path) if path is not None else DEFAULT_POLICY
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise PolicyError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PolicyError(f"{p}: not a readable policy file (invalid JSON: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PolicyError(f"{p}: not a ccswitch policy file (key 'format' must be {FORMAT!r})")
    version = doc.get("version")
    if version != POLICY_VERSION:
        raise PolicyError(f"{p}: policy format version {version!r} is not supported (this ccswitch reads "
                          f"version {POLICY_VERSION}); export it again with this ccswitch")
    want = doc.get("checksum")
    try:
        got = document_checksum(doc)
    except ValueError as e:  # NaN or Infinity somewhere: JSON allows them on read, the canonical form does not
        raise PolicyError(f"{p}: not a valid policy file ({e})") from None
    if want != got:
        raise PolicyError(f"{p}: checksum mismatch (file says {want}, content hashes to {got}): the file is "
                          "corrupt or was edited")
    try:
        return _build(p, doc, expect_features)
    except (KeyError, TypeError, IndexError) as e:
        raise PolicyError(f"{p}: malformed policy file ({type(e).__name__}: {e})") from None


def _build(p: Path, doc: dict[str, Any], expect_features: Sequence[str] | None) -> Policy:
    actions = tuple(doc["actions"])
    feats = doc["features"]
    names = tuple(feats["names"])
    net = doc["network"]
    activation = net.get("activation", "relu")
    if activation not in ACTIVATIONS:
        raise PolicyError(f"{p}: unknown activation {activation!r}")
    layers = net["layers"]
    if not layers:
        raise PolicyError(f"{p}: the network has no layers")
    kernels = [decode_array(layer["kernel"], f"{p}: network.layers[{i}].kernel") for i, layer in enumerate(layers)]
    biases = [decode_array(layer["bias"], f"{p}: network.layers[{i}].bias") for i, layer in enumerate(layers)]
    for i, (k, b) in enumerate(zip(kernels, biases, strict=True)):
        if k.ndim != 2 or b.shape != (k.shape[1],):
            raise PolicyError(f"{p}: network.layers[{i}]: kernel {list(k.shape)} and bias {list(b.shape)} "
                              "do not fit")
        if i and kernels[i - 1].shape[1] != k.shape[0]:
            raise PolicyError(f"{p}: network.layers[{i}] takes {k.shape[0]} inputs, layer {i - 1} gives "
                              f"{kernels[i - 1].shape[1]}")
    if kernels[0].shape[0] != len(names):
        raise PolicyError(f"{p}: wrong feature count: the file lists {len(names)} features but its first "
                          f"layer takes {kernels[0].shape[0]}")
    if kernels[-1].shape[1] != len(actions):
        raise PolicyError(f"{p}: the last layer gives {kernels[-1].shape[1]} Q-values for {len(actions)} actions")
    fv = feats.get("version")
    if fv != FEATURE_VERSION:
        raise PolicyError(f"{p}: trained on feature version {fv!r}, this ccswitch builds version "
                          f"{FEATURE_VERSION}; train a new policy (ccswitch train)")
    window = int(feats.get("window", 4))
    expected = tuple(expect_features) if expect_features is not None else tuple(feature_names(window, actions))
    if names != expected:
        if len(names) != len(expected):
            raise PolicyError(f"{p}: wrong feature count: the policy takes {len(names)} features, this ccswitch "
                              f"builds {len(expected)} (window {window}, actions {', '.join(actions)})")
        diff = next(i for i, (a, b) in enumerate(zip(names, expected, strict=True)) if a != b)
        raise PolicyError(f"{p}: feature {diff} is {names[diff]!r}, this ccswitch builds {expected[diff]!r}")
    nd = doc["normalisation"]
    norm = Normalisation(tuple(float(x) for x in nd["mean"]), tuple(float(x) for x in nd["std"]),
                         float(nd.get("clip", 10.0)))
    if not len(norm.mean) == len(norm.std) == len(BASE_FEATURES):
        raise PolicyError(f"{p}: normalisation needs {len(BASE_FEATURES)} means and stds, got "
                          f"{len(norm.mean)} and {len(norm.std)}")
    return Policy(actions=actions, feature_names=names, normalisation=norm, kernels=kernels, biases=biases,
                  activation=activation, window=window, interval_s=float(feats.get("interval_s", 1.0)),
                  training=doc.get("training", {}), evaluation=doc.get("evaluation", {}), path=p,
                  checksum=str(doc["checksum"]))


def annotate_policy(path: str | Path, evaluation: Mapping[str, Any]) -> str:
    """Record end-to-end results in a policy file (key ``evaluation``); returns the new checksum.

    The weights and the training record are untouched; the checksum covers the new key, so a
    hand edit of the numbers is refused at load like any other."""
    p = Path(path)
    load_policy(p)  # a valid file first
    doc = json.loads(p.read_text())
    doc["evaluation"] = json.loads(json.dumps(dict(evaluation), default=_jsonable))
    return write_signed(p, doc)
