"""ClientApp processes forked from a warm parent in a local federation, instead of started cold.

In subprocess isolation a Flower 1.41 SuperNode starts one ``flwr-clientapp`` process per message (its
SuperExec runs the command found on ``PATH``), and each one imports Flower's runtime, torch and ampfl anew:
about 3 CPU-s before it reads its message, paid by every node for every message (a SecAgg+ round sends
five). :class:`~ampfl.flower.local.LocalFederation` therefore starts one fork server per federation
(``python -m ampfl.flower.fork_server SOCKET``), which imports all of that once, and puts a ``flwr-clientapp``
shim first on the SuperNodes' ``PATH`` (:func:`write_shim`). The shim hands its arguments, working directory,
environment and standard streams (``SCM_RIGHTS``) to the server; the server forks, and the child runs Flower's
own ``flwr-clientapp`` entry point with them: the same code on the same arguments, in a process that starts
with the imports done. The shim forwards SIGTERM/SIGINT/SIGHUP to the child and exits with its exit code; it
runs the real ``flwr-clientapp`` when the server cannot be reached.

What a fork shares, and why it is safe here:

- the server holds no data, key or model: it only imports modules, so a child knows nothing a fresh
  process would not;
- randomness: the server draws none. Python's ``random`` reseeds itself in every child, numpy's global
  generator is reseeded from the OS in every child, and ampfl's client-side privacy randomness comes from
  the OS anyway (``np.random.default_rng()``, ``secrets``); torch's default generator keeps the fixed seed a
  fresh process starts with;
- the server is single-threaded (it refuses to fork otherwise), so a child starts with no lock held;
- the socket lives in a folder only this user can open (mode 0700), and the server serves only peers with
  its own user id (``SO_PEERCRED``): nobody else can make it run code;
- every child stays in the server's process group and inherits its environment, which carries the run's
  marker (:data:`ampfl.flower.local.MARKER`), so stopping the federation and the watchdog end them as they
  ended the cold processes; each child also watches the SuperExec (``--parent-pid``) as Flower's does.
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
from pathlib import Path

#: The command the shim stands in for (what flwr 1.41's SuperExec starts per message).
COMMAND = "flwr-clientapp"
#: Modules the server imports once, so that its children start with them loaded.
PRELOAD = (
    "flwr.supernode.cli.flwr_clientapp",
    "torch",
    "ampfl.flower.client_app",
    "ampfl.flower.secagg",
    "ampfl.fl.algorithms",
    "ampfl.fl.run.experiment",
)
#: What a forked child runs (``module:function``): Flower's ``flwr-clientapp`` entry point.
ENTRY = "flwr.supernode.cli.flwr_clientapp:flwr_clientapp"
_LEN = struct.Struct("!I")
_MAX_REQUEST = 1 << 22


def write_shim(bin_dir: Path, socket_path: Path, real: Path) -> Path:
    """Write the ``flwr-clientapp`` shim into ``bin_dir`` (put first on ``PATH``): it asks the server at
    ``socket_path`` for a forked ClientApp, or runs ``real`` (the venv's ``flwr-clientapp``)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / COMMAND
    shim.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "from ampfl.flower.fork_server import run_shim\n"
        f"sys.exit(run_shim({str(socket_path)!r}, {str(real)!r}, sys.argv[1:]))\n",
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
def run_shim(socket_path: str, real: str, args: list[str]) -> int:
    """The ``flwr-clientapp`` shim: a forked ClientApp with these ``args``, or the real command (exec)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(socket_path)
        request = json.dumps({"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        socket.send_fds(conn, [_LEN.pack(len(request))], [0, 1, 2])
        conn.sendall(request)
        started = _receive(conn)
    except OSError:
        conn.close()
        os.execv(real, [real, *args])  # no server: the cold start
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
    """In the forked child: close the server's descriptors (``inherited``), become the ClientApp process the
    shim asked for (``entry``, ``module:function``, with ``sys.argv`` set), then exit."""
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
        sys.argv = [COMMAND, *[str(a) for a in request["args"]]]  # type: ignore[attr-defined]
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


def serve(socket_path: Path, entry: str = ENTRY, preload: tuple[str, ...] = PRELOAD) -> None:
    """Import ``preload``, then fork one process per shim request, each running ``entry``
    (``module:function``), until SIGTERM (module docstring)."""
    for name in preload:
        importlib.import_module(name)
    if len(os.listdir("/proc/self/task")) != 1:  # a fork copies only this thread: locks could be held
        raise RuntimeError("the fork server has more than one thread after its imports; not forking")
    folder = socket_path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path))
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in events.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                fds: list[int] = []
                try:
                    if not _same_user(conn):
                        raise ConnectionError("a peer of another user")
                    head, fds, _, _ = socket.recv_fds(conn, _LEN.size, 3)
                    if len(fds) != 3:
                        raise ConnectionError("a request without its three standard streams")
                    request = _receive(conn, head)
                except (OSError, ValueError):
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    own = [listener.fileno(), conn.fileno(), wake_read, wake_write, events.fileno()]
                    _run_child(entry, own + [c.fileno() for c in children.values()], request, fds)
                for fd in fds:
                    os.close(fd)
                print(f"forked {pid}", flush=True)  # the server's log: how many ClientApps started warm
                children[pid] = conn
                try:
                    _send(conn, {"pid": pid})
                except OSError:
                    pass
            else:
                try:
                    os.read(wake_read, 4096)
                except BlockingIOError:
                    pass
                while children:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    ended = children.pop(pid, None)
                    if ended is not None:
                        try:
                            _send(ended, {"status": status})
                        except OSError:
                            pass
                        ended.close()


def main(argv: list[str]) -> int:
    """``python -m ampfl.flower.fork_server SOCKET [MODULE:FUNCTION]``: the ClientApp fork server, or one
    that forks processes running ``MODULE:FUNCTION`` (preloading only its module)."""
    if len(argv) not in (1, 2) or (len(argv) == 2 and ":" not in argv[1]):
        print("usage: python -m ampfl.flower.fork_server SOCKET [MODULE:FUNCTION]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on the terminal is ampfl deploy's to handle
    if len(argv) == 2:
        serve(Path(argv[0]), argv[1], (argv[1].partition(":")[0],))
    else:
        serve(Path(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
