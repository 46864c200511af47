#!/usr/bin/env python3
"""Stand-in programs of the e2e images (the real images cannot be pulled here), chosen by the name called.

- `vllm serve MODEL --host H --port P ...`: answers GET /health (200) and /v1/models on H:P, like vLLM's
  OpenAI-compatible server, until stopped.
- `torchrun [options] SCRIPT [args]`: where a test mounts torch into the container (harness.on_cpu), torch's
  own torchrun (`python -m torch.distributed.run`, what the `torchrun` console script runs) in this process;
  otherwise checks that SCRIPT is present and compiles (so its upload happened before the container
  started), prints what it would run, and exits 0.
- anything else (the image's default command): the device metrics exporter's /metrics on port 5000.
Every server stops with exit code 0 on SIGTERM, as the real ones do.
"""

import http.server
import importlib.util
import json
import os
import py_compile
import signal
import sys


def serve(host, port, routes):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = routes.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write((body or "").encode())

        def log_message(self, *args):
            pass

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"{os.path.basename(sys.argv[0])}: listening on {host}:{port}", flush=True)
    http.server.ThreadingHTTPServer((host, port), Handler).serve_forever()


def option(args, name, default):
    return args[args.index(name) + 1] if name in args else default


def main(argv):
    program = os.path.basename(argv[0])
    if program == "vllm":
        args = argv[2:]
        model = args[0]
        models = json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]})
        serve(
            option(args, "--host", "0.0.0.0"),
            int(option(args, "--port", "8000")),
            {"/health": "", "/v1/models": models},
        )
    elif program == "torchrun" and importlib.util.find_spec("torch") is not None:
        os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *argv[1:]])
    elif program == "torchrun":
        script = next(a for a in argv[1:] if a.endswith(".py"))
        py_compile.compile(script, doraise=True, cfile="/tmp/standin-compiled.pyc")
        print(f"torchrun stand-in: {script} is present and compiles; exiting 0", flush=True)
    else:
        serve("0.0.0.0", 5000, {"/metrics": "# stand-in for rocm/device-metrics-exporter\n"})


if __name__ == "__main__":
    main(sys.argv)
