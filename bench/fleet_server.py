#!/usr/bin/env python3
"""A minimal GET/PUT/HEAD file server for the remote cache benchmarks on
machines without nginx (the GPU machine): serves ROOT on 127.0.0.1:PORT
(PORT 0: a free one, printed on stdout). PUT writes a temporary file and
renames it into place, as a cache server must. Not for production.

    fleet_server.py ROOT [PORT]
"""
import http.server
import os
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def path_of(self):
        rel = os.path.normpath(self.path.split("?", 1)[0]).lstrip("/")
        if rel.startswith(".."):
            return None
        return os.path.join(ROOT, rel)

    def reply(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        p = self.path_of()
        try:
            with open(p, "rb") as f:
                self.reply(200, f.read())
        except (OSError, TypeError):
            self.reply(404)

    do_HEAD = do_GET

    def do_PUT(self):
        p = self.path_of()
        n = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(n)
        if p is None or len(data) != n:
            return self.reply(400)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
        self.reply(201)

    def log_message(self, *args):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 0), Handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
