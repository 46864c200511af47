"""Stand-ins for what the vLLM production-stack router talks to, for tests/e2e/test_e2e_router.py: a Kubernetes API
server that serves one namespace's pods (list, watch, get) and records every request, and vLLM replicas that serve
/v1/models and /v1/chat/completions only with the key (as their proxy does), /metrics and /health without it, and
answer with their own name and the Authorization header they received."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


def pod(name: str, ip: str, labels: dict[str, str], namespace: str) -> dict[str, Any]:
    """A ready, running pod as the API server returns it (the fields the kubernetes client's models require)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "resourceVersion": "1"},
        "spec": {"containers": [{"name": "vllm", "image": "vllm", "command": ["vllm", "serve", "m"]}]},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "containerStatuses": [
                {"name": name, "image": "vllm", "imageID": "vllm", "ready": True, "restartCount": 0}
                for name in ("vllm", "proxy")
            ],
        },
    }


class ApiServer(ThreadingHTTPServer):
    """GET /api/v1/namespaces/NS/pods[?watch=true] and GET .../pods/NAME; `add` pushes an ADDED event to watchers."""

    daemon_threads = True

    def __init__(self, namespace: str) -> None:
        super().__init__(("127.0.0.1", 0), _ApiHandler)
        self.namespace = namespace
        self.pods: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.watchers: list[queue.Queue[dict[str, Any]]] = []
        self.lock = threading.Lock()

    def add(self, new: dict[str, Any]) -> None:
        with self.lock:
            self.pods[new["metadata"]["name"]] = new
            for watcher in self.watchers:
                watcher.put({"type": "ADDED", "object": new})


class _ApiHandler(BaseHTTPRequestHandler):
    server: ApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        query = parse_qs(url.query)
        self.server.requests.append(("GET", url.path, query))
        prefix = f"/api/v1/namespaces/{self.server.namespace}/pods"
        if url.path == prefix and query.get("watch", [""])[0].lower() == "true":
            self._watch(query)
        elif url.path == prefix:
            self._json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": self._matching(query)})
        elif url.path.startswith(prefix + "/") and url.path[len(prefix) + 1 :] in self.server.pods:
            self._json(200, self.server.pods[url.path[len(prefix) + 1 :]])
        else:
            self._json(404, {"kind": "Status", "code": 404})

    def _do_other(self) -> None:
        self.server.requests.append((self.command, urlparse(self.path).path, {}))
        self._json(403, {"kind": "Status", "code": 403})

    do_POST = do_PUT = do_PATCH = do_DELETE = _do_other  # noqa: N815

    def _matching(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        return [p for p in self.server.pods.values() if _selected(p, query)]

    def _watch(self, query: dict[str, list[str]]) -> None:
        events: queue.Queue[dict[str, Any]] = queue.Queue()
        with self.server.lock:
            for existing in self._matching(query):
                events.put({"type": "ADDED", "object": existing})
            self.server.watchers.append(events)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        # timeoutSeconds ends the stream, as the API server does (0: never).
        timeout = int(query.get("timeoutSeconds", ["0"])[0])
        deadline = time.monotonic() + timeout if timeout else None
        try:
            for event in _drain(events, deadline):
                if _selected(event["object"], query):
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        finally:
            with self.server.lock:
                self.server.watchers.remove(events)


def _selected(candidate: dict[str, Any], query: dict[str, list[str]]) -> bool:
    """Whether the pod matches the request's equality-based labelSelector (`k=v,k=v`)."""
    wanted = dict(item.split("=", 1) for item in query.get("labelSelector", [""])[0].split(",") if item)
    return all(candidate["metadata"]["labels"].get(k) == v for k, v in wanted.items())


def _drain(events: queue.Queue[dict[str, Any]], deadline: float | None) -> Iterator[dict[str, Any]]:
    """The events as they come, until the deadline (None: forever)."""
    while deadline is None or time.monotonic() < deadline:
        try:
            yield events.get(timeout=0.2)
        except queue.Empty:
            continue


class Replica(ThreadingHTTPServer):
    """One stand-in vLLM pod on `ip`:`port` serving `model`, with the key check of its proxy; `key` None: a rogue pod
    that answers every request and records each one's headers (GETs too)."""

    daemon_threads = True

    def __init__(self, ip: str, port: int, model: str, key: str | None) -> None:
        super().__init__((ip, port), _ReplicaHandler)
        self.model, self.key = model, key
        self.seen: list[dict[str, str]] = []


class _ReplicaHandler(BaseHTTPRequestHandler):
    server: Replica
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        return self.server.key is None or self.headers.get("Authorization") == f"Bearer {self.server.key}"

    def do_GET(self) -> None:  # noqa: N802
        path = urlparse(self.path).path
        if self.server.key is None:
            self.server.seen.append({"path": path, **{k.lower(): v for k, v in self.headers.items()}})
        if path == "/metrics":
            self._reply(200, "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n", "text/plain")
        elif path == "/health":
            self._reply(200, {})
        elif path == "/v1/models" and self._authorized():
            model = {"id": self.server.model, "object": "model", "created": 0, "owned_by": "vllm", "root": None}
            self._reply(200, {"object": "list", "data": [model]})
        else:
            self._reply(401 if path.startswith("/v1") else 404, {"error": path})

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})
        if not self._authorized():
            self._reply(401, {"error": "unauthorized"})
            return
        request = json.loads(body or b"{}")
        self._reply(
            200,
            {
                "id": "x",
                "object": "chat.completion",
                "model": request.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": self.server.server_address[0]}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )
