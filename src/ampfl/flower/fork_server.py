"""The Flower processes of a local federation forked from a warm parent, instead of started cold.

A local Flower 1.41 federation is a tree of Python processes, and every one of them imports Flower's
runtime (≈ 1.6 CPU-s) before it does anything: the SuperLink and its ``flower-superexec``, each SuperNode and
its ``flower-superexec``, the ``flwr-serverapp`` the SuperLink's SuperExec starts per run, and one
``flwr-clientapp`` per message and node (a SecAgg+ round sends five), which also import torch and ampfl
(≈ 3 CPU-s). :class:`~ampfl.flower.local.LocalFederation` therefore starts one fork server per federation
(``python -m ampfl.flower.fork_server SOCKET``), which imports all of that once, and puts one shim per
command (:data:`ENTRIES`, :func:`write_shim`) first on its processes' ``PATH``; it starts the SuperLink and
the SuperNodes through their shims too. A shim hands its command, arguments, working directory,
environment and standard streams (``SCM_RIGHTS``) to the server; the server forks, and the child runs
Flower's own entry point of that command with them: the same code on the same arguments, in a process that
starts with the imports done. The shim and its child live and die together: the shim forwards
SIGTERM/SIGINT/SIGHUP to the child and exits with its exit code, and the server SIGKILLs a child whose shim
is gone (killed, even with ``kill -9``). A shim runs the real command when the server cannot be reached.

What a fork shares, and why it is safe here:

- the server holds no data, key or model: it only imports modules, so a child knows nothing a fresh
  process would not;
- randomness: the server draws none. Python's ``random`` reseeds itself in every child, numpy's global
  generator is reseeded from the OS in every child, and ampfl's client-side privacy randomness comes from
  the OS anyway (``np.random.default_rng()``, ``secrets``); torch's default generator keeps the fixed seed a
  fresh process starts with;
- the server is single-threaded (it refuses to fork otherwise), so a child starts with no lock held, and it
  has opened no gRPC channel or server: each child makes its own;
- the socket lives in a folder only this user can open (mode 0700), and the server serves only peers with
  its own user id (``SO_PEERCRED``) and runs only the entry points of :data:`ENTRIES`: nobody else can make it
  run code, and a request cannot name a module;
- every child stays in the server's process group and inherits its environment, which carries the run's
  marker (:data:`ampfl.flower.local.MARKER`), so stopping the federation and the watchdog end them as they
  ended the cold processes; SuperExecs and apps also watch their parent (``--parent-pid``) as Flower's do.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The commands a shim stands in for, each with the entry point (``module:function``) its forked child runs:
#: Flower 1.41's own (its console scripts), and for ``flower-supernode`` Flower's through
#: :func:`ampfl.flower.prompt_supernode.flower_supernode` (the local federation's prompt nodes).
ENTRIES = {
    "flower-superlink": "flwr.superlink.cli.flower_superlink:flower_superlink",
    "flower-supernode": "ampfl.flower.prompt_supernode:flower_supernode",
    "flower-superexec": "flwr.supercore.cli.flower_superexec:flower_superexec",
    "flwr-serverapp": "flwr.superlink.cli.flwr_serverapp:flwr_serverapp",
    "flwr-clientapp": "flwr.supernode.cli.flwr_clientapp:flwr_clientapp",
}
#: Modules the server imports once, so that its children start with them loaded.
PRELOAD = (
    *(entry.partition(":")[0] for entry in ENTRIES.values()),
    "torch",
    "ampfl.flower.client_app",
    "ampfl.flower.server_app",
    "ampfl.flower.secagg",
    "ampfl.fl.algorithms",
    "ampfl.fl.run.experiment",
)
_LEN = struct.Struct("!I")
_MAX_REQUEST = 1 << 22


def write_shim(bin_dir: Path, socket_path: Path, command: str, real: Sequence[str | Path]) -> Path:
    """Write the shim of ``command`` into ``bin_dir`` (put first on ``PATH``): it asks the server at
    ``socket_path`` for a forked ``command``, or runs ``real`` (the real command's argv before its
    arguments: the venv's script, or ``python -m MODULE``)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / command
    fallback = [str(part) for part in real]
    shim.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "from ampfl.flower.fork_server import run_shim\n"
        f"sys.exit(run_shim({str(socket_path)!r}, {command!r}, {fallback!r}, sys.argv[1:]))\n",
        encoding="utf-8",
    )
    shim.chmod(0o755)
    return shim


def _send(conn: socket.socket, payload: dict[str, object]) -> None:
    data = json.dumps(payload).encode()
    conn.sendall(_LEN.pack(len(data)) + data)


def _receive(conn: socket.socket, head: bytes = b"") -> dict[str, object]:
    """One length-prefixed JSON message (``head``: its first bytes, when already read)."""
    while len(head) < _LEN.size:
        more = conn.recv(_LEN.size - len(head))
        if not more:
            raise ConnectionError("the peer closed the connection")
        head += more
    (size,) = _LEN.unpack(head)
    if size > _MAX_REQUEST:
        raise ConnectionError(f"a message of {size} bytes is too long")
    body = b""
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise ConnectionError("the peer closed the connection")
        body += more
    message: dict[str, object] = json.loads(body)
    return message


# -- the shim ----------------------------------------------------------------------------------------
def run_shim(socket_path: str, command: str, real: list[str], args: list[str]) -> int:
    """The shim of ``command``: a forked ``command`` with these ``args``, or ``real`` + ``args`` (exec)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(socket_path)
        request = json.dumps(
            {"command": command, "args": args, "cwd": os.getcwd(), "env": dict(os.environ)}
        ).encode()
        socket.send_fds(conn, [_LEN.pack(len(request))], [0, 1, 2])
        conn.sendall(request)
        started = _receive(conn)
    except OSError:
        conn.close()
        os.execv(real[0], [*real, *args])  # no server: the cold start
    child = int(started["pid"])  # type: ignore[call-overload]

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    try:
        ended = _receive(conn)
    except OSError:
        return 1  # the server died: its children with it
    status = int(ended["status"])  # type: ignore[call-overload]
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


# -- the server --------------------------------------------------------------------------------------
def _run_child(entry: str, inherited: list[int], request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: close the server's descriptors (``inherited``), become the process the shim
    asked for (``entry``, ``module:function``, with ``sys.argv`` set), then exit."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for fd in inherited:
            os.close(fd)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        sys.stdin = open(0, closefd=False)  # the process's own descriptors
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})  # type: ignore[call-overload]
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()  # the global generator from the OS, as in a fresh process
        sys.argv = [str(request["command"]), *[str(a) for a in request["args"]]]  # type: ignore[attr-defined]
        module, _, function = entry.partition(":")
        run = getattr(importlib.import_module(module), function)
        try:
            run()
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # report, then exit as a failed process would
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # the reader may be gone
                pass
    os._exit(code)


def _same_user(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


def _bind(socket_path: Path) -> socket.socket:
    """A listening socket at ``socket_path`` in a folder only this user can open; the path appears only
    once it listens (bound under another name, then renamed), so a waiting caller never connects early."""
    folder = socket_path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    starting = socket_path.with_name(socket_path.name + ".starting")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(starting))
    listener.listen(64)
    os.rename(starting, socket_path)
    return listener


def _accept(
    listener: socket.socket, entries: Mapping[str, str]
) -> tuple[socket.socket, dict[str, object], list[int]] | None:
    """The next shim's connection, request and three standard streams; None (all closed) for a peer of
    another user, a malformed request or a command not in ``entries``."""
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        if not _same_user(conn):
            raise ConnectionError("a peer of another user")
        head, fds, _, _ = socket.recv_fds(conn, _LEN.size, 3)
        if len(fds) != 3:
            raise ConnectionError("a request without its three standard streams")
        request = _receive(conn, head)
        if request.get("command") not in entries:
            raise ConnectionError("a command the server does not run")
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    return conn, request, fds


def serve(socket_path: Path, entries: Mapping[str, str] = ENTRIES, preload: Sequence[str] = PRELOAD) -> None:
    """Import ``preload``, then fork one process per shim request, each running its command's entry point
    in ``entries`` (``module:function``), until SIGTERM (module docstring)."""
    for name in preload:
        importlib.import_module(name)
    if len(os.listdir("/proc/self/task")) != 1:  # a fork copies only this thread: locks could be held
        raise RuntimeError("the fork server has more than one thread after its imports; not forking")
    listener = _bind(socket_path)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}  # a live child → its shim's connection
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in events.select():
            if key.fileobj is listener:
                accepted = _accept(listener, entries)
                if accepted is None:
                    continue
                conn, request, fds = accepted
                pid = os.fork()
                if pid == 0:
                    own = [listener.fileno(), conn.fileno(), wake_read, wake_write, events.fileno()]
                    entry = entries[str(request["command"])]
                    _run_child(entry, own + [c.fileno() for c in children.values()], request, fds)
                for fd in fds:
                    os.close(fd)
                print(f"forked {pid}: {request['command']}", flush=True)  # the log: what started warm
                children[pid] = conn
                try:
                    _send(conn, {"pid": pid})
                except OSError:
                    pass
                events.register(conn, selectors.EVENT_READ, pid)
            elif key.fileobj is wake_read:
                try:
                    os.read(wake_read, 4096)
                except BlockingIOError:
                    pass
                _reap(children, events)
            elif children.get(key.data) is key.fileobj:  # not reaped earlier in this batch
                # a shim sends nothing after its request: readable means it is gone, and its process
                # dies with it (unreaped, the child still holds its pid: the signal cannot reach another)
                events.unregister(key.fileobj)
                os.kill(key.data, signal.SIGKILL)


def _reap(children: dict[int, socket.socket], events: selectors.BaseSelector) -> None:
    """Reap the children that ended and send each one's wait status to its shim."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        ended = children.pop(pid, None)
        if ended is None:
            continue
        try:
            events.unregister(ended)
        except KeyError:  # its shim was gone, and unregistered then
            pass
        try:
            _send(ended, {"status": status})
        except OSError:
            pass
        ended.close()


def main(argv: list[str]) -> int:
    """``python -m ampfl.flower.fork_server SOCKET [MODULE:FUNCTION]``: the fork server of :data:`ENTRIES`,
    or one whose children run ``MODULE:FUNCTION`` for every command (preloading only its module)."""
    if len(argv) not in (1, 2) or (len(argv) == 2 and ":" not in argv[1]):
        print("usage: python -m ampfl.flower.fork_server SOCKET [MODULE:FUNCTION]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on the terminal is ampfl deploy's to handle
    if len(argv) == 2:
        serve(Path(argv[0]), dict.fromkeys(ENTRIES, argv[1]), (argv[1].partition(":")[0],))
    else:
        serve(Path(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
