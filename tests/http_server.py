"""A ``sglang-eagle serve`` process for the tests: start it on a free loopback port, wait until it
generates, talk to it over HTTP, stop it (SIGTERM to its process group, as a user's Ctrl-C)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(port: int, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)


def post_raw(port: int, path: str, data: bytes) -> tuple[int, str]:
    """The status and body of a POST of ``data`` as it is (malformed requests included)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# Seconds between readiness probes: the test waits on every one, and a probe before the port listens is free.
READY_POLL_S = 0.25


def wait_until_ready(port: int, server: subprocess.Popen, log_path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"serve exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health_generate", timeout=120):
                return
        except OSError:
            time.sleep(READY_POLL_S)
    pytest.fail(f"server not ready in {timeout} s:\n{log_path.read_text()[-3000:]}")


@contextmanager
def serving(serve_args: list[str], log_path, env: dict | None = None, timeout: float = 480,
            sglang_args: tuple[str, ...] = ()):
    """Run ``sglang-eagle serve SERVE_ARGS -- --port P ... SGLANG_ARGS`` (small KV pool); yield
    ``(port, process)``."""
    port = free_port()
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "sglang_eagle_ext", "serve", *serve_args, "--", "--port",
                                   str(port), "--mem-fraction-static", "0.3", "--max-total-tokens", "2048",
                                   *sglang_args],
                                  env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until_ready(port, server, log_path, timeout)
            yield port, server
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
