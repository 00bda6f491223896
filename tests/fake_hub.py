"""A local stand-in for the Hugging Face Hub's file API, on 127.0.0.1, for `ddtree weights fetch` tests.

The real Hub is not reachable from here, so this serves what `huggingface_hub.hf_hub_download` asks for:
HEAD and GET of /ORG/NAME/resolve/REVISION/PATH, answered with X-Repo-Commit, ETag (the sha256, as the
Hub does for LFS files) and Content-Length; `Range: bytes=N-` gets 206 (resumed downloads); a gated
repository without `Authorization: Bearer TOKEN` gets 401 with X-Error-Code: GatedRepo, an unknown file
404 with EntryNotFound. Knobs for the tests: `corrupt` (path -> bytes served instead), `cut_once`
(path -> bytes: the first GET of that path sends that many bytes of the body, then drops the
connection), `redirect_to` (a base URL: file requests answer 302 to the same path there, with the
X-Linked-Size/X-Linked-Etag headers, as the Hub sends LFS files to its CDN). Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


@dataclass
class FakeRepo:
    revisions: dict[str, dict[str, bytes]]  # commit -> {path: content}
    main: str  # the commit refs/main points at
    gated: bool = False
    token: str = ""


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo]
    corrupt: dict[str, bytes] = field(default_factory=dict)
    cut_once: dict[str, int] = field(default_factory=dict)  # path -> bytes sent before the drop
    redirect_to: str = ""  # another server's base URL (a CDN on another host): file requests go there
    requests: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _error(self, status: int, code: str, message: str) -> None:
                raw = json.dumps({"error": message}).encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(raw)

            def _answer(self, body: bool) -> None:
                path = unquote(self.path.split("?", 1)[0]).lstrip("/")
                parts = path.split("/")
                auth = self.headers.get("Authorization")
                hub.requests.append((self.command, path, self.headers.get("Range"), auth))
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._error(404, "RepoNotFound", "not a resolve URL")
                repo_id, revision, filename = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
                repo = hub.repos.get(repo_id)
                if repo is None:
                    return self._error(404, "RepoNotFound", "Repository not found")
                if repo.gated and auth != f"Bearer {repo.token}":
                    return self._error(401, "GatedRepo", "Access to this model is restricted")
                commit = repo.main if revision == "main" else revision
                files = repo.revisions.get(commit)
                if files is None:
                    return self._error(404, "RevisionNotFound", "Invalid rev id")
                if filename not in files:
                    return self._error(404, "EntryNotFound", "Entry not found")
                data = files[filename]
                etag = hashlib.sha256(data).hexdigest()
                if hub.redirect_to:
                    self.send_response(302)
                    self.send_header("Location", f"{hub.redirect_to}/{path}")
                    self.send_header("X-Repo-Commit", commit)
                    self.send_header("X-Linked-Etag", f'"{etag}"')
                    self.send_header("X-Linked-Size", str(len(hub.corrupt.get(filename, data))))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                served = hub.corrupt.get(filename, data)
                start = 0
                ranged = self.headers.get("Range")
                if ranged and ranged.startswith("bytes=") and ranged.endswith("-"):
                    start = int(ranged[len("bytes=") : -1])
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", commit)
                self.send_header("ETag", f'"{etag}"')
                self.send_header("Content-Length", str(len(served) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(served) - 1}/{len(served)}")
                self.end_headers()
                if not body:
                    return
                if filename in hub.cut_once and not start:
                    self.wfile.write(served[: hub.cut_once.pop(filename)])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(served[start:])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
