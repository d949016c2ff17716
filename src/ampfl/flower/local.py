"""A local Flower federation (one SuperLink, one SuperNode per client) and ``flwr run`` against a SuperLink.

:class:`LocalFederation` starts ``flower-superlink --insecure`` and one ``flower-supernode`` per client on
free ports (each in its own process group, so the ``flower-superexec`` children and the app processes they
spawn are ended with it) and stops them all in :meth:`LocalFederation.stop`: SIGTERM to each group, SIGKILL
to what is left after a grace period, then SIGKILL to any process still carrying the run's :data:`MARKER`.
Use it as a context manager: the federation is stopped on success, failure and Ctrl-C alike. With a marker, a
watchdog process (:mod:`ampfl.flower.watchdog`) kills every marked process within about a second if this
process dies without stopping them (``kill -9``).

Every process runs with the venv's ``bin`` first on ``PATH`` (the SuperLink and SuperNodes spawn
``flower-superexec`` from it), ``FLWR_TELEMETRY_ENABLED=0``, ``FLWR_DISABLE_UPDATE_CHECK=1`` and a private
``FLWR_HOME`` whose ``config.toml`` names the SuperLink connection for ``flwr run``, and
``FLWR_SUPEREXEC_TASK_POLL_INTERVAL`` = 0.1 s. The SuperNodes are Flower's, run by
:mod:`ampfl.flower.prompt_supernode` so that an idle node pulls every 0.2 s instead of 3 s
(``AMPFL_PROMPT_SUPERNODES=0`` for Flower's 3 s). Every Flower process of the federation (SuperLink,
SuperNodes, their SuperExecs, the ServerApp and the ClientApps) is forked from a warm parent that imported
Flower, torch and ampfl once (:mod:`ampfl.flower.fork_server`; ``AMPFL_FORK_PROCESSES=0`` for Flower's cold
starts).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from ampfl.flower.prompt_supernode import SUPEREXEC_POLL_SECONDS

#: The name of the SuperLink connection in ``$FLWR_HOME/config.toml``.
CONNECTION = "ampfl"
#: Seconds each process group gets after SIGTERM before SIGKILL.
GRACE_SECONDS = 15.0
#: What a SuperNode logs once the SuperLink has accepted it (flwr 1.41, ``start_client_internal``).
CONNECTED_LINE = b"SuperNode ID:"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], timeout: float, pause: float
) -> bool:
    """Poll ``ready`` every ``pause`` seconds while ``process`` runs: True once it holds, False if
    ``process`` exits first or ``timeout`` seconds pass (``process.poll()`` tells which)."""
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if ready():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
    return False


def _listens(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_for_port(port: int, timeout: float, process: subprocess.Popen[bytes]) -> None:
    if _wait_until(lambda: _listens(port), process, timeout, 0.1):
        return
    if process.poll() is not None:
        raise RuntimeError(f"flower-superlink exited with code {process.returncode} (see its log)")
    raise RuntimeError(f"flower-superlink did not listen on port {port} within {timeout:.0f} s")


#: Set in every process ``ampfl deploy`` starts (value: the run folder), so that leftovers can be found.
MARKER = "AMPFL_DEPLOY_RUN"


def flower_env(
    flwr_home: Path, superlink: str, marker: str = "", root_certificates: Path | None = None
) -> dict[str, str]:
    """The environment of every Flower process and of ``flwr run`` (module docstring).

    ``marker`` is stored in :data:`MARKER`; the processes' children inherit it. With ``root_certificates``
    (a PEM CA file) ``flwr run`` connects with TLS and verifies the SuperLink against it; else insecurely.
    """
    flwr_home.mkdir(parents=True, exist_ok=True)
    transport = (
        "insecure = true\n"
        if root_certificates is None
        else f"insecure = false\nroot-certificates = {json.dumps(str(Path(root_certificates).resolve()))}\n"
    )
    (flwr_home / "config.toml").write_text(
        f'[superlink.{CONNECTION}]\naddress = "{superlink}"\n{transport}', encoding="utf-8"
    )
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env.update({"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_HOME": str(flwr_home)})
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", str(SUPEREXEC_POLL_SECONDS))
    env[MARKER] = marker
    return env


def marked_processes(marker: str) -> list[int]:
    """Ids of this user's live processes whose environment has :data:`MARKER` = ``marker`` (Linux /proc), or
    ``marker#<token>`` (``ampfl deploy`` marks its processes with the run folder and the run's token)."""
    needle = f"{MARKER}={marker}".encode()
    prefix = needle + b"#"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(v == needle or v.startswith(prefix) for v in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


#: Seconds between two checks while ``flwr run`` runs (federation health, progress).
POLL_SECONDS = 0.5


def flwr_run(
    app_dir: Path,
    env: dict[str, str],
    log: Path,
    timeout: float,
    *,
    on_poll: Callable[[], None] | None = None,
) -> int:
    """``flwr run APP_DIR ampfl --stream`` (output to ``log``); returns its exit code.

    ``on_poll`` is called every :data:`POLL_SECONDS` while it runs (to show progress, or to raise — e.g.
    when a SuperNode died — which stops ``flwr run`` and propagates). Raises ``subprocess.TimeoutExpired``
    after ``timeout`` seconds.
    """
    bin_dir = Path(sys.executable).parent
    with open(log, "ab") as handle:
        process = subprocess.Popen(
            [str(bin_dir / "flwr"), "run", str(app_dir), CONNECTION, "--stream"],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    return process.wait(timeout=POLL_SECONDS)
                except subprocess.TimeoutExpired:
                    if time.monotonic() > deadline:
                        raise subprocess.TimeoutExpired(process.args, timeout) from None
                if on_poll is not None:
                    on_poll()
        except BaseException:
            _stop_group(process)
            raise


def _stop_group(process: subprocess.Popen[bytes], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM to the process group of ``process``, SIGKILL after ``grace`` seconds."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # children that outlived their parent
    except ProcessLookupError:
        pass
    process.wait()


def _kill_marked(marker: str, patience: float = GRACE_SECONDS) -> None:
    """SIGKILL every live process marked with ``marker``, again until none is left (a killed process takes a
    moment to die, and one a SuperNode was starting may appear after the first look), for at most
    ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while True:
        left = marked_processes(marker)
        if not left or time.monotonic() > deadline:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


class LocalFederation:
    """One SuperLink and ``num_clients`` SuperNodes on this machine (module docstring).

    Args:
        num_clients: SuperNodes to start (``partition-id`` 0 … num_clients − 1).
        workdir: where the process logs go.
        flwr_home: the ``FLWR_HOME`` of every process (a temporary folder).
        marker: the value of :data:`MARKER` in every process.
        state_dir: when given, SuperNode i gets the node config ``state-dir = state_dir/node-i`` (where
            MS-PAFL keeps its private submodel, and the node caches its shard of the task in ``cache/``:
            :mod:`ampfl.flower.node_cache`).
        fork_processes: fork the federation's Flower processes from a warm parent
            (:mod:`ampfl.flower.fork_server`) instead of starting each cold; None = unless
            ``AMPFL_FORK_PROCESSES=0``.
    """

    def __init__(
        self,
        num_clients: int,
        workdir: Path,
        flwr_home: Path,
        marker: str = "",
        state_dir: Path | None = None,
        tls_dir: Path | None = None,
        fork_processes: bool | None = None,
    ) -> None:
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1. Found {num_clients}.")
        self.num_clients = num_clients
        self.workdir = Path(workdir)
        self.port = free_port()
        self.superlink = f"127.0.0.1:{self.port}"
        self.marker = marker
        self.state_dir = state_dir
        self.tls: dict[str, Path] | None = None
        self.node_keys: list[tuple[Path, Path]] = []
        if tls_dir is not None:  # TLS on loopback with a throw-away CA (ampfl.flower.tls)
            from ampfl.flower.tls import write_local_tls, write_node_keys

            self.tls = write_local_tls(Path(tls_dir))
            self.node_keys = write_node_keys(Path(tls_dir) / "nodes", num_clients)
        root = None if self.tls is None else self.tls["ca.crt"]
        self.env = flower_env(Path(flwr_home), self.superlink, marker, root_certificates=root)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.names: list[str] = []
        self.watchdog: subprocess.Popen[bytes] | None = None
        self.started_seconds = 0.0
        self._log_starts: dict[str, int] = {}  # SuperNode log → its size before this start (logs append)
        self._connected: set[str] = set()
        if fork_processes is None:
            fork_processes = os.environ.get("AMPFL_FORK_PROCESSES", "1") != "0"
        self.fork_processes = fork_processes and hasattr(socket, "send_fds")
        self.fork_server: subprocess.Popen[bytes] | None = None
        self._fork_dir: Path | None = None
        self._shims: Path | None = None  # the fork server's shims, once it listens
        self.process_env = self.env  # the SuperLink's and SuperNodes' (the shims first on PATH)

    def _spawn(
        self, argv: list[str], log_name: str, env: dict[str, str] | None = None, *, tracked: bool = True
    ) -> subprocess.Popen[bytes]:
        path = self.workdir / log_name
        if log_name.startswith("supernode-"):
            self._log_starts[log_name] = path.stat().st_size if path.exists() else 0
        with open(path, "ab") as log:
            process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env if env is None else env,
                cwd=self.workdir,
                start_new_session=True,
            )
        if tracked:
            self.processes.append(process)
            self.names.append(log_name.removesuffix(".log"))
        return process

    @staticmethod
    def _cold_command(name: str) -> list[str]:
        """The argv that starts Flower's command ``name`` cold: the venv's script; for ``flower-supernode``
        :mod:`ampfl.flower.prompt_supernode` (Flower's, prompt unless ``AMPFL_PROMPT_SUPERNODES=0``)."""
        if name == "flower-supernode":
            return [sys.executable, "-m", "ampfl.flower.prompt_supernode"]
        return [str(Path(sys.executable).parent / name)]

    def _command(self, name: str) -> list[str]:
        """The argv that starts Flower's command ``name`` here: its shim once the fork server listens."""
        return [str(self._shims / name)] if self._shims is not None else self._cold_command(name)

    def _start_fork_server(self, timeout: float) -> None:
        """Start the fork server (:mod:`ampfl.flower.fork_server`) and, once it listens, write its shims
        into a folder put first on :attr:`process_env`'s ``PATH``. If it exits or does not listen within
        ``timeout`` seconds (its log says why), it is stopped and every process starts cold."""
        from ampfl.flower.fork_server import ENTRIES, write_shim

        self._fork_dir = Path(tempfile.mkdtemp(prefix="ampfl-fork-"))  # mode 0700, a short socket path
        sock = self._fork_dir / "socket"
        self.fork_server = self._spawn(
            [sys.executable, "-m", "ampfl.flower.fork_server", str(sock)],
            "fork-server.log",
            {**self.env, "OPENBLAS_NUM_THREADS": "1"},  # numpy's BLAS without threads: safe to fork
            tracked=False,  # best effort: without it each process starts cold, as Flower starts it
        )
        if not _wait_until(sock.exists, self.fork_server, timeout, 0.05):  # its path appears once it listens
            _stop_group(self.fork_server, grace=0.0)
            self.fork_server = None
            return
        shims = self._fork_dir / "bin"
        for name in ENTRIES:
            write_shim(shims, sock, name, self._cold_command(name))
        self._shims = shims
        self.process_env = {**self.env, "PATH": str(shims) + os.pathsep + self.env["PATH"]}

    def _start_watchdog(self) -> None:
        """:mod:`ampfl.flower.watchdog`: kills the marked processes if this process dies (``kill -9``)."""
        env = {k: v for k, v in self.env.items() if k != MARKER}  # the watchdog itself carries no marker
        self.watchdog = subprocess.Popen(
            [sys.executable, "-m", "ampfl.flower.watchdog", str(os.getpid()), self.marker],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def _server_transport(self) -> list[str]:
        if self.tls is None:
            return ["--insecure"]
        return [
            "--enable-supernode-auth",
            "--ssl-ca-certfile",
            str(self.tls["ca.crt"]),
            "--ssl-certfile",
            str(self.tls["server.crt"]),
            "--ssl-keyfile",
            str(self.tls["server.key"]),
        ]

    def _client_transport(self, node: int) -> list[str]:
        if self.tls is None:
            return ["--insecure"]
        private = self.node_keys[node][0]
        return ["--root-certificates", str(self.tls["ca.crt"]), "--auth-supernode-private-key", str(private)]

    def _register_nodes(self) -> None:
        """``flwr supernode register`` of every SuperNode's public key (TLS federations)."""
        bin_dir = Path(sys.executable).parent
        with open(self.workdir / "register.log", "ab") as log:
            for _, public in self.node_keys:
                done = subprocess.run(
                    [str(bin_dir / "flwr"), "supernode", "register", str(public), CONNECTION],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    check=False,
                )
                if done.returncode != 0:
                    log_path = self.workdir / "register.log"
                    code = done.returncode
                    raise RuntimeError(f"flwr supernode register failed (code {code}); see {log_path}")

    def start(self, timeout: float = 60.0) -> None:
        """Start the watchdog (with a marker), the SuperLink, wait until it listens, then the SuperNodes."""
        begun = time.perf_counter()
        if self.marker and self.watchdog is None:
            self._start_watchdog()
        if self.fork_processes:
            self._start_fork_server(timeout)
        link = self._spawn(
            [
                *self._command("flower-superlink"),
                *self._server_transport(),
                "--disable-runtime-dependency-installation",
                "--port",
                str(self.port),
            ],
            "superlink.log",
            self.process_env,
        )
        _wait_for_port(self.port, timeout, link)
        if self.tls is not None:
            self._register_nodes()
        for pid in range(self.num_clients):
            node_config = f"partition-id={pid} num-partitions={self.num_clients}"
            if self.state_dir is not None:
                node_config += f' state-dir="{(self.state_dir / f"node-{pid}").resolve()}"'
            self._spawn(
                [
                    *self._command("flower-supernode"),
                    *self._client_transport(pid),
                    "--superlink",
                    self.superlink,
                    "--port",
                    str(free_port()),
                    "--node-config",
                    node_config,
                ],
                f"supernode-{pid}.log",
                self.process_env,
            )
        self.started_seconds = time.perf_counter() - begun

    def stop(self) -> float:
        """Stop every process started here (SuperNodes first); returns the seconds it took."""
        begun = time.perf_counter()
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in reversed(self.processes):
            _stop_group(process)
        self.processes.clear()
        self.names.clear()
        if self.fork_server is not None:  # its forked processes are in its process group
            _stop_group(self.fork_server)
            self.fork_server = None
        if self._fork_dir is not None:
            shutil.rmtree(self._fork_dir, ignore_errors=True)
            self._fork_dir = None
            self._shims = None
            self.process_env = self.env
        if self.marker:  # descendants that left their process group (or were starting while we stopped)
            _kill_marked(self.marker)
        if self.watchdog is not None:
            self.watchdog.terminate()
            self.watchdog.wait()
            self.watchdog = None
        return time.perf_counter() - begun

    def connected(self) -> int:
        """How many of the SuperNodes started here the SuperLink has accepted so far (each logs
        :data:`CONNECTED_LINE` once; read from its log, past what earlier runs wrote there)."""
        for name, start in self._log_starts.items():
            if name in self._connected:
                continue
            try:
                with open(self.workdir / name, "rb") as log:
                    log.seek(start)
                    if CONNECTED_LINE in log.read():
                        self._connected.add(name)
            except OSError:
                continue
        return len(self._connected)

    def dead(self) -> list[str]:
        """One line per started process that has exited (name, exit code, log), in start order."""
        lines = []
        for process, name in zip(self.processes, self.names, strict=True):
            code = process.poll()
            if code is not None:
                lines.append(f"{name} exited (code {code}); see {self.workdir / (name + '.log')}")
        return lines

    def pids(self) -> list[int]:
        """Process ids (and process-group ids) of the processes started here."""
        return [p.pid for p in self.processes]

    def __enter__(self) -> LocalFederation:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
