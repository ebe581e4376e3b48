"""A thin, typed ctypes binding to the system libbpf (libbpf.so.1, >= 1.1).

Only what ccswitch needs: open/load/close objects, find programs and maps,
attach (cgroup, iterator, struct_ops as a link), read and write maps in
batches, and run iterators.  libbpf already does CO-RE relocation, BTF and
the verifier dance; this module only makes ownership explicit so that every
kernel object is released when Python lets go of it:

* `BpfObject` owns the loaded object (maps and programs); closing it frees
  programs and maps that nothing else references.
* `Link` owns one attachment; links are never pinned, so the kernel drops the
  attachment when the fd closes, even if the process is killed with SIGKILL.

libbpf >= 1.0 semantics are assumed: functions return NULL / a negative errno
and set errno.  Errors raise `BpfError` with a single-line message.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("ccswitch.libbpf")

BPF_F_LINK = 1 << 13
BPF_STRUCT_OPS = 44  # enum bpf_attach_type
BPF_ANY = 0
BPF_MAP_INFO_NAME_OFFSET = 24  # struct bpf_map_info: type, id, key_size, value_size, max_entries, map_flags, name[16]


class BpfError(RuntimeError):
    """A libbpf or bpf(2) failure, with a one-line explanation (and the errno when there is one)."""

    errno: int = 0


def _load_libbpf() -> ctypes.CDLL:
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise BpfError(
            f"cannot load libbpf ({name}): install it (apt-get install libbpf1) and retry"
        ) from exc


_lib = _load_libbpf()
_libc = ctypes.CDLL(None, use_errno=True)

_vp = ctypes.c_void_p
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class _BatchOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _IterLinkInfo(ctypes.Structure):  # union bpf_iter_link_info, its map member (the union is 16 bytes)
    _fields_ = [("map_fd", ctypes.c_uint32), ("_rest", ctypes.c_uint32 * 3)]


class _IterAttachOpts(ctypes.Structure):  # struct bpf_iter_attach_opts
    _fields_ = [("sz", ctypes.c_size_t), ("link_info", ctypes.POINTER(_IterLinkInfo)),
                ("link_info_len", ctypes.c_uint32)]


def _proto(name: str, restype: object, *argtypes: object) -> None:
    fn = getattr(_lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


_proto("bpf_object__open_file", _vp, ctypes.c_char_p, _vp)
_proto("bpf_object__load", ctypes.c_int, _vp)
_proto("bpf_object__close", None, _vp)
_proto("bpf_object__find_program_by_name", _vp, _vp, ctypes.c_char_p)
_proto("bpf_object__find_map_by_name", _vp, _vp, ctypes.c_char_p)
_proto("bpf_program__fd", ctypes.c_int, _vp)
_proto("bpf_program__set_autoload", ctypes.c_int, _vp, ctypes.c_bool)
_proto("bpf_program__attach_cgroup", _vp, _vp, ctypes.c_int)
_proto("bpf_program__attach_iter", _vp, _vp, _vp)
_proto("bpf_map__fd", ctypes.c_int, _vp)
_proto("bpf_map__set_map_flags", ctypes.c_int, _vp, ctypes.c_uint32)
_proto("bpf_map__map_flags", ctypes.c_uint32, _vp)
_proto("bpf_map__set_max_entries", ctypes.c_int, _vp, ctypes.c_uint32)
_proto("bpf_map__max_entries", ctypes.c_uint32, _vp)
_proto("bpf_map__reuse_fd", ctypes.c_int, _vp, ctypes.c_int)
_proto("bpf_map__attach_struct_ops", _vp, _vp)
_proto("bpf_map__key_size", ctypes.c_uint32, _vp)
_proto("bpf_map__value_size", ctypes.c_uint32, _vp)
_proto("bpf_link__fd", ctypes.c_int, _vp)
_proto("bpf_link__destroy", ctypes.c_int, _vp)
_proto("bpf_link__disconnect", None, _vp)
_proto("bpf_link_create", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, _vp)
_proto("bpf_iter_create", ctypes.c_int, ctypes.c_int)
_proto("bpf_map_update_elem", ctypes.c_int, ctypes.c_int, _vp, _vp, ctypes.c_uint64)
_proto("bpf_map_lookup_elem", ctypes.c_int, ctypes.c_int, _vp, _vp)
_proto("bpf_map_delete_elem", ctypes.c_int, ctypes.c_int, _vp)
_proto("bpf_map_get_next_key", ctypes.c_int, ctypes.c_int, _vp, _vp)
_proto("bpf_map_lookup_batch", ctypes.c_int, ctypes.c_int, _vp, _vp, _vp, _vp,
       ctypes.POINTER(ctypes.c_uint32), _vp)
_proto("bpf_map_update_batch", ctypes.c_int, ctypes.c_int, _vp, _vp,
       ctypes.POINTER(ctypes.c_uint32), _vp)
_proto("bpf_map_delete_batch", ctypes.c_int, ctypes.c_int, _vp,
       ctypes.POINTER(ctypes.c_uint32), _vp)
_proto("bpf_map_get_next_id", ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32))
_proto("bpf_map_get_fd_by_id", ctypes.c_int, ctypes.c_uint32)
_proto("bpf_obj_get_info_by_fd", ctypes.c_int, ctypes.c_int, _vp, ctypes.POINTER(ctypes.c_uint32))
_proto("libbpf_set_print", _vp, _vp)
_libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
_libc.vsnprintf.restype = ctypes.c_int


# libbpf's log (including the verifier's) goes to Python logging; the last
# lines are kept so that a failed load can say *why* in its error.
_recent_log: list[str] = []


@_PRINT_FN
def _print_cb(level: int, fmt: bytes, args: int) -> int:
    buf = ctypes.create_string_buffer(4096)
    _libc.vsnprintf(buf, len(buf), fmt, args)
    text = buf.value.decode(errors="replace").rstrip()
    if text:
        _recent_log.append(text)
        del _recent_log[:-40]
        log.debug("%s", text)
    return 0


_lib.libbpf_set_print(ctypes.cast(_print_cb, _vp))


# Capabilities ccswitch's BPF needs (docs/daemon.md, "Running under systemd"), by number
# (linux/capability.h); CAP_SYS_ADMIN only for finding maps by id (find_map_by_name).
CAP_BITS = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39}
BPF_CAPS = ("CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN")


def missing_capabilities(names: tuple[str, ...] | list[str], status: str | None = None) -> list[str]:
    """The capabilities among *names* (keys of CAP_BITS) that this process' effective set lacks.

    Read from CapEff in /proc/self/status (or *status*, that file's text); a root process
    started by systemd or setpriv can hold fewer than all.  [] when CapEff cannot be read.
    """
    if status is None:
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            return []
    eff = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("CapEff:")), None)
    if eff is None:
        return []
    return [n for n in names if not eff >> CAP_BITS[n] & 1]


def eperm_hint() -> str:
    """What to do about EPERM from bpf(2): name the missing capabilities when some are."""
    missing = missing_capabilities(BPF_CAPS)
    if not missing:
        return "run as root (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON)"
    caps = " ".join(missing)
    return (f"missing {caps} in this process' effective capabilities (systemd: add {caps} to the unit's "
            "CapabilityBoundingSet= and AmbientCapabilities=)")


def _err(what: str, code: int | None = None, hint: str = "") -> BpfError:
    code = abs(code) if code else ctypes.get_errno()
    msg = f"{what}: {os.strerror(code)} (errno {code})"
    if code == errno.EPERM:
        msg += f"; {eperm_hint()}"
    elif hint:
        msg += f"; {hint}"
    e = BpfError(msg)
    e.errno = code
    return e


@dataclass
class Link:
    """One attachment.  Closing the link (or process exit) detaches it."""

    name: str
    _ptr: int | None = None
    _fd: int = -1  # raw link fd for links created with bpf_link_create

    @property
    def fd(self) -> int:
        return _lib.bpf_link__fd(self._ptr) if self._ptr else self._fd

    @property
    def attached(self) -> bool:
        return bool(self._ptr) or self._fd >= 0

    def cgroup_id(self) -> int | None:
        """The cgroup a cgroup link is attached to: 0 once detached from outside (`bpftool link
        detach`), None when the link's info cannot be read (struct bpf_link_info: type, id,
        prog_id, then the union whose cgroup member starts with the u64 cgroup_id at offset 16)."""
        info = ctypes.create_string_buffer(64)
        ln = ctypes.c_uint32(len(info))
        if _lib.bpf_obj_get_info_by_fd(self.fd, info, ctypes.byref(ln)) != 0:
            return None
        return int.from_bytes(info.raw[16:24], "little")

    def detach(self) -> None:
        if self._ptr:
            _lib.bpf_link__destroy(self._ptr)
            self._ptr = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Map:
    """A map of a loaded object, addressed by its fd."""

    def __init__(self, name: str, fd: int, key_size: int, value_size: int, ptr: int | None = None):
        self.name, self.fd, self.key_size, self.value_size, self._ptr = (
            name, fd, key_size, value_size, ptr)

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        rc = _lib.bpf_map_update_elem(self.fd, key, value, flags)
        if rc < 0:
            raise _err(f"update of map {self.name}", rc)

    def lookup(self, key: bytes) -> bytes | None:
        out = ctypes.create_string_buffer(self.value_size)
        rc = _lib.bpf_map_lookup_elem(self.fd, key, out)
        if rc < 0:
            if -rc == errno.ENOENT:
                return None
            raise _err(f"lookup in map {self.name}", rc)
        return out.raw

    def delete(self, key: bytes) -> bool:
        rc = _lib.bpf_map_delete_elem(self.fd, key)
        if rc < 0 and -rc != errno.ENOENT:
            raise _err(f"delete from map {self.name}", rc)
        return rc == 0

    def keys(self) -> Iterator[bytes]:
        prev = None
        nxt = ctypes.create_string_buffer(self.key_size)
        while _lib.bpf_map_get_next_key(self.fd, prev, nxt) == 0:
            yield nxt.raw
            prev = ctypes.create_string_buffer(nxt.raw, self.key_size)

    def lookup_batch(self, chunk: int = 4096) -> tuple[bytes, bytes, int]:
        """Read the whole map with BPF_MAP_LOOKUP_BATCH.

        Returns (keys, values, count) as packed byte strings so that callers
        can view them with numpy without a per-entry Python object.
        """
        ks, vs = self.key_size, self.value_size
        keys, values = bytearray(), bytearray()
        total = 0
        in_tok = None
        out_tok = ctypes.create_string_buffer(max(ks, 8))
        kbuf = ctypes.create_string_buffer(ks * chunk)
        vbuf = ctypes.create_string_buffer(vs * chunk)
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), 0, 0)
        while True:
            count = ctypes.c_uint32(chunk)
            rc = _lib.bpf_map_lookup_batch(self.fd, in_tok, out_tok, kbuf, vbuf,
                                           ctypes.byref(count), ctypes.byref(opts))
            if rc < 0 and -rc != errno.ENOENT:
                raise _err(f"batch lookup in map {self.name}", rc)
            n = count.value
            keys += kbuf.raw[: n * ks]
            values += vbuf.raw[: n * vs]
            total += n
            if rc < 0:  # ENOENT: no more entries
                return bytes(keys), bytes(values), total
            in_tok = ctypes.create_string_buffer(out_tok.raw, len(out_tok))

    def update_batch(self, keys: bytes, values: bytes, count: int) -> None:
        if count == 0:
            return
        n = ctypes.c_uint32(count)
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), 0, 0)
        rc = _lib.bpf_map_update_batch(self.fd, keys, values, ctypes.byref(n), ctypes.byref(opts))
        if rc < 0:
            raise _err(f"batch update of map {self.name}", rc)

    def delete_batch(self, keys: bytes, count: int) -> None:
        """Delete the given keys; keys that are already gone are skipped."""
        if count == 0:
            return
        n = ctypes.c_uint32(count)
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), 0, 0)
        rc = _lib.bpf_map_delete_batch(self.fd, keys, ctypes.byref(n), ctypes.byref(opts))
        if rc < 0 and -rc != errno.ENOENT:
            raise _err(f"batch delete from map {self.name}", rc)
        if rc < 0:  # stopped at a missing key: delete the rest one by one
            ks = self.key_size
            for i in range(n.value, count):
                self.delete(keys[i * ks:(i + 1) * ks])


class BpfObject:
    """A BPF object file opened and loaded with libbpf.

    Use as a context manager, or call `close()`; links made from it are
    tracked and detached first.
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)
        if not self.path.exists():
            raise BpfError(
                f"BPF object {self.path} is missing; build it with `make -C bpf` "
                "(scripts/setup.sh does this)")
        ctypes.set_errno(0)
        self._obj = _lib.bpf_object__open_file(str(self.path).encode(), None)
        if not self._obj:
            raise _err(f"open of {self.path.name}")
        self._links: list[Link] = []
        self.loaded = False

    # -- before load -------------------------------------------------------
    def _map_ptr(self, name: str) -> int:
        ptr = _lib.bpf_object__find_map_by_name(self._obj, name.encode())
        if not ptr:
            raise BpfError(f"map {name} not found in {self.path.name}")
        return ptr

    def _prog_ptr(self, name: str) -> int:
        ptr = _lib.bpf_object__find_program_by_name(self._obj, name.encode())
        if not ptr:
            raise BpfError(f"program {name} not found in {self.path.name}")
        return ptr

    def set_map_flags(self, name: str, flags: int) -> None:
        ptr = self._map_ptr(name)
        _lib.bpf_map__set_map_flags(ptr, _lib.bpf_map__map_flags(ptr) | flags)

    def set_max_entries(self, name: str, n: int) -> None:
        rc = _lib.bpf_map__set_max_entries(self._map_ptr(name), n)
        if rc < 0:
            raise _err(f"setting max_entries of map {name} to {n}", rc)

    def max_entries(self, name: str) -> int:
        return _lib.bpf_map__max_entries(self._map_ptr(name))

    def reuse_map_fd(self, name: str, fd: int) -> None:
        """Share an existing map (e.g. one owned by another object) instead of creating one."""
        rc = _lib.bpf_map__reuse_fd(self._map_ptr(name), fd)
        if rc < 0:
            raise _err(f"reuse of map fd for {name}", rc)

    def set_autoload(self, prog: str, autoload: bool) -> None:
        _lib.bpf_program__set_autoload(self._prog_ptr(prog), autoload)

    def load(self) -> None:
        if self.loaded:  # idempotent
            return
        _recent_log.clear()
        rc = _lib.bpf_object__load(self._obj)
        if rc < 0:
            tail = " | ".join(line for line in _recent_log[-3:] if line)
            raise _err(f"load of {self.path.name}", rc,
                       hint=f"libbpf said: {tail}" if tail else "")
        self.loaded = True

    # -- after load --------------------------------------------------------
    def map(self, name: str) -> Map:
        ptr = self._map_ptr(name)
        return Map(name, _lib.bpf_map__fd(ptr), _lib.bpf_map__key_size(ptr),
                   _lib.bpf_map__value_size(ptr), ptr)

    def prog_fd(self, name: str) -> int:
        return _lib.bpf_program__fd(self._prog_ptr(name))

    def _track(self, link: Link) -> Link:
        self._links.append(link)
        return link

    def attach_cgroup(self, prog: str, cgroup_path: str) -> Link:
        fd = os.open(cgroup_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            ctypes.set_errno(0)
            ptr = _lib.bpf_program__attach_cgroup(self._prog_ptr(prog), fd)
        finally:
            os.close(fd)
        if not ptr:
            raise _err(f"attach of {prog} to cgroup {cgroup_path}")
        return self._track(Link(f"{prog}@{cgroup_path}", ptr))

    def attach_iter(self, prog: str, map_name: str | None = None) -> Link:
        """An iterator link; `map_name`: a map iterator (e.g. iter/bpf_sk_storage_map) over that map."""
        ctypes.set_errno(0)
        if map_name is None:
            ptr = _lib.bpf_program__attach_iter(self._prog_ptr(prog), None)
        else:
            info = _IterLinkInfo(self.map(map_name).fd)
            opts = _IterAttachOpts(ctypes.sizeof(_IterAttachOpts), ctypes.pointer(info), ctypes.sizeof(info))
            ptr = _lib.bpf_program__attach_iter(self._prog_ptr(prog), ctypes.byref(opts))
        if not ptr:
            raise _err(f"attach of iterator {prog}" + (f" over map {map_name}" if map_name else ""))
        return self._track(Link(prog, ptr))

    def attach_struct_ops(self, map_name: str) -> Link:
        """Register a struct_ops map through a BPF link.

        The map must have been given BPF_F_LINK before load (see
        `set_map_flags`): the kernel then ties the registration to the link
        fd, so a crashed process cannot leave the algorithm registered.
        libbpf 1.1 predates `.struct_ops.link`, hence the two steps.
        """
        ptr = self._map_ptr(map_name)
        ctypes.set_errno(0)
        lptr = _lib.bpf_map__attach_struct_ops(ptr)  # fills the map's value
        if not lptr:
            raise _err(f"struct_ops value update for {map_name}")
        _lib.bpf_link__disconnect(lptr)  # its detach would be a no-op delete
        _lib.bpf_link__destroy(lptr)
        fd = _lib.bpf_link_create(_lib.bpf_map__fd(ptr), 0, BPF_STRUCT_OPS, None)
        if fd < 0:
            raise _err(f"struct_ops link for {map_name}", fd,
                       hint="is an algorithm of the same name already registered?")
        return self._track(Link(map_name, None, fd))

    def detach_all(self) -> None:
        for link in reversed(self._links):
            link.detach()
        self._links.clear()

    def close(self) -> None:
        self.detach_all()
        if self._obj:
            _lib.bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # last resort; normal paths call close()
        if getattr(self, "_obj", None):
            self.close()


def run_iter(link: Link, bufsize: int = 1 << 20) -> bytes:
    """Run an iterator once: create an iterator fd from the link, read to EOF."""
    fd = _lib.bpf_iter_create(link.fd)
    if fd < 0:
        raise _err(f"creation of iterator {link.name}", fd)
    try:
        chunks = []
        while True:
            try:
                chunk = os.read(fd, bufsize)
            except InterruptedError:
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def held_ids(pid: int, kind: str) -> list[int]:
    """Ids of the BPF objects of `kind` ("prog", "map" or "link") process `pid` holds an fd to
    (its /proc/PID/fdinfo lines `prog_id:` / `map_id:` / `link_id:`)."""
    key = f"{kind}_id:"
    ids = []
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                ids += [int(line.split()[1]) for line in f if line.startswith(key)]
        except OSError:  # closed meanwhile
            continue
    return ids


def find_map_by_name(name: str) -> int | None:
    """Open an fd to a live map by its (kernel, 15-char) name; None if absent."""
    want = name.encode()[:15]
    cur = ctypes.c_uint32(0)
    info = ctypes.create_string_buffer(256)
    while _lib.bpf_map_get_next_id(cur.value, ctypes.byref(cur)) == 0:
        fd = _lib.bpf_map_get_fd_by_id(cur.value)
        if fd < 0:
            continue
        ln = ctypes.c_uint32(len(info))
        ctypes.memset(info, 0, len(info))
        if _lib.bpf_obj_get_info_by_fd(fd, info, ctypes.byref(ln)) == 0:
            got = info.raw[BPF_MAP_INFO_NAME_OFFSET:BPF_MAP_INFO_NAME_OFFSET + 16].split(b"\0")[0]
            if got == want:
                return fd
        os.close(fd)
    return None
