"""A local stand-in for the Hugging Face hub: one repository served over HTTP the way the hub
answers ``huggingface_hub`` (model info with file sizes, ``resolve`` downloads with byte ranges),
recording the bytes it sends of each file."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class FakeHub:
    def __init__(self, repo_id: str, source: str, commit: str) -> None:
        self.repo_id, self.source, self.commit = repo_id, source, commit
        self.sent: dict[str, int] = defaultdict(int)  # file -> bytes of it sent
        self.files = sorted(os.path.relpath(os.path.join(root, name), source).replace(os.sep, "/")
                            for root, _, names in os.walk(source) for name in names)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "FakeHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _info(self) -> bytes:
        siblings = [{"rfilename": f, "size": os.path.getsize(os.path.join(self.source, f))} for f in self.files]
        return json.dumps({"id": self.repo_id, "modelId": self.repo_id, "sha": self.commit, "private": False,
                           "siblings": siblings}).encode()

    def _handler(self):
        hub = self
        info = re.compile(rf"/api/models/{re.escape(hub.repo_id)}(/revision/[^/]+)?")
        resolve = re.compile(rf"/{re.escape(hub.repo_id)}/resolve/[^/]+/(.+)")

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                path = unquote(urlparse(self.path).path)
                if info.fullmatch(path):
                    return self._send(200, hub._info(), {"Content-Type": "application/json"}, body)
                match = resolve.fullmatch(path)
                if not match or match.group(1) not in hub.files:
                    return self._send(404, b"{}", {"Content-Type": "application/json",
                                                   "X-Error-Code": "EntryNotFound"}, body)
                name = match.group(1)
                with open(os.path.join(hub.source, name), "rb") as handle:
                    data = handle.read()
                headers = {"X-Repo-Commit": hub.commit, "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
                           "Accept-Ranges": "bytes"}
                ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
                if ranged:
                    begin = int(ranged.group(1))
                    end = min(int(ranged.group(2) or len(data) - 1), len(data) - 1)
                    headers["Content-Range"] = f"bytes {begin}-{end}/{len(data)}"
                    return self._send(206, data[begin:end + 1], headers, body, name)
                self._send(200, data, headers, body, name)

            def _send(self, status: int, data: bytes, headers: dict, body: bool, name: str | None = None) -> None:
                self.send_response(status)
                for key, value in {**headers, "Content-Length": str(len(data))}.items():
                    self.send_header(key, value)
                self.end_headers()
                if body:
                    self.wfile.write(data)
                    if name is not None:
                        hub.sent[name] += len(data)

        return Handler
