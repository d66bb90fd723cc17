"""The server under soak (``benchmarks/soak.py``): a loopback address, a ``sglang-eagle serve`` process
the soak starts and stops, and a watcher that samples the server's memory and notices any of its
processes going away.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import httpx
import psutil

READY_POLL_S = 2.0
STOP_GRACE_S = 60
IDLE_POLL_S = 1.0


class SoakError(RuntimeError):
    """A setup problem the soak reports in one line, without a traceback."""


def loopback_base_url(url: str) -> str:
    """``url`` without a trailing slash, refused unless its host is a loopback address: the soak sends
    hostile requests at full rate and must never aim them at another machine."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parsed.scheme != "http" or not loopback or parsed.port is None:
        raise SoakError(f"--base-url {url!r}: the soak talks to a server on this machine only; give "
                        "http://127.0.0.1:PORT (or localhost / [::1]) with the port")
    return f"http://{parsed.netloc}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listener_pid(port: int) -> int | None:
    """The process listening on ``port``, when this user may see it."""
    for connection in psutil.net_connections(kind="inet"):
        if connection.laddr and connection.laddr.port == port and connection.status == psutil.CONN_LISTEN:
            return connection.pid
    return None


def wait_until_ready(base_url: str, process: subprocess.Popen | None, log_path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SoakError(f"the server exited with {process.returncode} before it was ready; its log: {log_path}")
        try:
            if httpx.get(f"{base_url}/health_generate", timeout=120).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(READY_POLL_S)
    raise SoakError(f"the server was not ready within {timeout:.0f} s; its log: {log_path}")


def start_server(serve_args: list[str], sglang_args: list[str], log_path: str, timeout: float,
                 env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """``sglang-eagle serve SERVE_ARGS -- --host 127.0.0.1 --port P SGLANG_ARGS`` in its own process
    group, its output in ``log_path``; returns it and its base URL once it generates."""
    port = free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "sglang_eagle_ext", "serve", *serve_args, "--", "--host",
                                    "127.0.0.1", "--port", str(port), *sglang_args],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(base_url, process, log_path, timeout)
    except BaseException:
        stop_server(process)
        raise
    return process, base_url


def stop_server(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (as a user's Ctrl-C), SIGKILL if it outstays the grace."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_GRACE_S)


def wait_until_idle(base_url: str, timeout: float) -> dict:
    """Poll SGLang's ``/v1/loads`` until no request runs or waits: after the clients stop, requests they
    abandoned (closed streams, timeouts) must have been freed. The check's verdict and numbers."""
    deadline, started = time.monotonic() + timeout, time.monotonic()
    running = waiting = None
    while True:
        try:
            answer = httpx.get(f"{base_url}/v1/loads", timeout=30)
        except httpx.HTTPError as error:
            return {"pass": False, "reason": f"/v1/loads: {type(error).__name__}"}
        if answer.status_code != 200:
            return {"pass": False, "reason": f"/v1/loads answered {answer.status_code}"}
        loads = answer.json().get("loads") or []
        running = sum(load.get("num_running_reqs", 0) for load in loads)
        waiting = sum(load.get("num_waiting_reqs", 0) for load in loads)
        if running == 0 and waiting == 0:
            return {"pass": True, "seconds": round(time.monotonic() - started, 1)}
        if time.monotonic() >= deadline:
            return {"pass": False, "running": running, "waiting": waiting, "seconds": round(timeout, 1)}
        time.sleep(IDLE_POLL_S)


def _nvidia_smi(*query: str) -> list[list[str]]:
    done = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                          timeout=30)
    return [[field.strip() for field in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def gpu_memory_mib(pids: set[int]) -> tuple[float, str] | None:
    """GPU memory held by ``pids`` (the server's processes) and ``"server processes"``; where the
    driver names no process (containers often hide them), the whole of GPU 0 and ``"GPU 0"``: other
    programs on the GPU then count too."""
    try:
        held = [float(used) for pid, used in _nvidia_smi("--query-compute-apps=pid,used_memory")
                if pid.isdigit() and int(pid) in pids]
        if held:
            return sum(held), "server processes"
        return float(_nvidia_smi("--query-gpu=memory.used", "-i", "0")[0][0]), "GPU 0"
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _running(process: psutil.Process) -> bool:
    """Alive and not a zombie (an ended child its parent has not reaped yet)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def sglang_title(process: psutil.Process) -> str | None:
    """The title an SGLang component gives its process (``sglang::scheduler``, ``sglang::detokenizer``),
    or None for other processes (compile and pool workers, which come and go by design)."""
    try:
        return next((part for part in process.cmdline() if part.startswith("sglang::")), None)
    except psutil.Error:
        return None


class ServerWatch:
    """Samples the resident memory of the server's process tree (and GPU memory) every ``every`` s, and
    records an event whenever the server process or one of its SGLang components (the processes SGLang
    titles ``sglang::...``) ends, or the port's listener changes: each is a server restart as a client
    sees it. Other children ending (worker pools) are counted apart, in ``helpers_ended``."""

    def __init__(self, pid: int, port: int, every: float, gpu: bool):
        self.root = psutil.Process(pid)
        self.port, self.every, self.gpu = port, every, gpu
        self.children = {child.pid: sglang_title(child) for child in self.root.children(recursive=True)}
        self.helpers_ended = 0
        self.listener = listener_pid(port)
        self.rss: list[tuple[float, float]] = []
        self.gpu_mib: list[tuple[float, float]] = []
        self.gpu_scope: set[str] = set()  # what the GPU samples measured (gpu_memory_mib)
        self.events: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    @property
    def server_gone(self) -> bool:
        return not self.root.is_running()

    def sample(self) -> None:
        now = time.monotonic()
        if not self.root.is_running():
            if not self.events or "server process" not in self.events[-1]:
                self.events.append(f"server process {self.root.pid} ended")
            return
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        alive = {process.pid for process in tree if _running(process)}
        for pid, title in list(self.children.items()):
            if pid not in alive:
                if title is None:
                    self.helpers_ended += 1
                else:
                    self.events.append(f"server component {pid} ({title}) ended")
                del self.children[pid]
        rss = 0
        for process in tree:
            try:
                rss += process.memory_info().rss
            except psutil.Error:
                continue
        self.rss.append((now, rss / 2**20))
        listener = listener_pid(self.port)
        if listener is not None and self.listener is not None and listener != self.listener:
            self.events.append(f"port {self.port} now served by pid {listener}, not {self.listener}")
            self.listener = listener
        if self.gpu:
            used = gpu_memory_mib(alive)
            if used is not None:
                self.gpu_mib.append((now, used[0]))
                self.gpu_scope.add(used[1])

    def run(self) -> None:
        while not self.stopped.is_set():
            self.sample()
            self.stopped.wait(self.every)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=60)
