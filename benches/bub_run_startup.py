#!/usr/bin/env python3
"""Time from starting `bub run` on a fresh database to its model request.

Starts a minimal OpenAI-compatible server on loopback that answers at once,
then runs the release binary N times, each with a new empty BUB_HOME, and
reports the time until the server saw the request and until the process
exited. Target: under 100 ms to the model request.

    cargo build --release && python3 benches/bub_run_startup.py [runs]
"""
import http.server
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ARRIVED = threading.Event()
REPLY = (
    b'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        ARRIVED.set()
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(REPLY)))
        self.end_headers()
        self.wfile.write(REPLY)

    def log_message(self, *args):
        pass


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    root = pathlib.Path(__file__).resolve().parent.parent
    binary = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", root / "target")) / "release" / "bub"
    if not binary.exists():
        sys.exit(f"{binary} is missing: run `cargo build --release` first")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    to_request, to_exit = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            env = {
                "PATH": os.environ.get("PATH", ""),
                "HOME": home,
                "BUB_HOME": home,
                "BUB_MODEL": "openai:bench",
                "BUB_OPENAI_API_BASE": base,
                "BUB_OPENAI_API_KEY": "bench",
            }
            ARRIVED.clear()
            start = time.perf_counter()
            process = subprocess.Popen([str(binary), "run", "hi"], env=env, cwd=home,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if not ARRIVED.wait(10):
                process.kill()
                sys.exit("bub never called the model: " + process.stderr.read().decode())
            to_request.append((time.perf_counter() - start) * 1000)
            process.wait(10)
            to_exit.append((time.perf_counter() - start) * 1000)
            if process.returncode != 0:
                sys.exit("bub run failed: " + process.stderr.read().decode())
    server.shutdown()

    def summary(values):
        values = sorted(values)
        return (f"median {statistics.median(values):6.1f} ms   p90 {values[int(len(values) * 0.9) - 1]:6.1f} ms"
                f"   min {values[0]:6.1f} ms")

    print(f"bub run on a fresh database, {runs} runs")
    print(f"  start → model request: {summary(to_request)}")
    print(f"  start → exit:          {summary(to_exit)}")


if __name__ == "__main__":
    main()
