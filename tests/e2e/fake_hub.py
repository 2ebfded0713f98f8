"""A local stand-in for the Hugging Face hub's HTTP API, for `hearth pull` tests (never the
internet): GET /api/models/ORG/NAME/revision/REV?blobs=true (the file list with sizes, git
blob ids and LFS sha256) and GET /ORG/NAME/resolve/REV/FILE (the content, with Range
support). Knobs: `drop_once` (files whose first transfer is cut half-way), `corrupt` (files
served with one byte changed), `gated` (repos answering 401 without `Authorization: Bearer
TOKEN`). Every request's path and Range header is recorded in `requests`."""
import hashlib
import http.server
import json
import threading

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repos, token="hf_secret"):
        self.repos = repos  # {"org/name": {"file": bytes or a path to read}}
        self.token = token
        self.drop_once, self.corrupt, self.gated = set(), set(), set()
        self.requests = []
        self._data = {}
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                hub.requests.append((self.path, self.headers.get("Range")))
                hub._serve(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def content(self, repo, name):
        key = (repo, name)
        if key not in self._data:
            v = self.repos[repo][name]
            self._data[key] = v if isinstance(v, bytes) else open(v, "rb").read()
        return self._data[key]

    def _send(self, h, status, body, headers=()):
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _serve(self, h):
        path = h.path.split("?")[0]
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            repo, rev = "/".join(parts[2:4]), parts[5]
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo, rev = "/".join(parts[:2]), parts[3]
        else:
            return self._send(h, 404, b'{"error":"no such route"}')
        if repo not in self.repos:
            return self._send(h, 404, b'{"error":"Repository not found"}')
        if repo in self.gated and h.headers.get("Authorization") != f"Bearer {self.token}":
            return self._send(h, 401, b'{"error":"Access to this gated repo is restricted"}')
        if rev not in ("main", COMMIT):
            return self._send(h, 404, b'{"error":"Revision not found"}')
        if parts[0] == "api":
            siblings = []
            for name in sorted(self.repos[repo]):
                data = self.content(repo, name)
                s = {"rfilename": name, "size": len(data),
                     "blobId": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
                if not name.endswith((".md", ".json", ".txt")):
                    s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                siblings.append(s)
            return self._send(h, 200, json.dumps({"id": repo, "sha": COMMIT, "siblings": siblings}).encode())
        name = "/".join(parts[4:])
        if name not in self.repos[repo]:
            return self._send(h, 404, b'{"error":"Entry not found"}')
        data = self.content(repo, name)
        if name in self.corrupt:
            data = data[:10] + bytes([data[10] ^ 0xFF]) + data[11:]
        start, status = 0, 200
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start, status = int(rng[6:-1]), 206
        body = data[start:]
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if name in self.drop_once:
            self.drop_once.discard(name)
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        h.wfile.write(body)
