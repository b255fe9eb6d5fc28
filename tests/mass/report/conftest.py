"""Real headless Chromium (Debian's package) driven over the DevTools pipe, network sunk.

Two independent records of what a page fetches:

- the DevTools ``Network`` events of the page: every request it makes, any scheme;
- a local HTTP proxy the browser must use for every host (loopback included), which records
  each connection. Chromium's own services (update, time, sign-in) also connect at start-up
  whatever the flags; their domains are :data:`BROWSER_SERVICE_DOMAINS` and are ignored,
  any other host fails the test.

A negative control page with an external image and stylesheet proves both records see a
request when one is made.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

# Chromium's own services (component and extension updates, network time, sign-in) connect at
# start-up whatever the flags; they live under these Google domains. A page's request to one
# of them is still caught by the DevTools record, which sees every request a page makes.
BROWSER_SERVICE_DOMAINS = ("google.com", "googleapis.com", "gvt1.com", "gvt2.com")
FLAGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-features=NetworkTimeServiceQuerying,OptimizationHints",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
]


def chromium_path() -> str | None:
    """Debian's `chromium`; skipped only outside CI (CI=true must have it: `make test`)."""
    path = shutil.which("chromium")
    if path is None and not os.environ.get("CI"):
        pytest.skip("chromium is not installed (apt-get install chromium); CI requires it")
    assert path is not None, "CI: chromium must be installed (make test installs it)"
    return path


def _service(host: str) -> bool:
    return any(host == d or host.endswith("." + d) for d in BROWSER_SERVICE_DOMAINS)


class ConnectionRecorder:
    """A proxy that accepts, records the request line's host, and closes."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(2.0)
            try:
                first = conn.recv(4096).split(b"\r\n", 1)[0].decode("latin-1")
            except OSError:
                first = "<no request line>"
            self.lines.append(first)
            conn.close()

    def hosts(self, since: int = 0) -> set[str]:
        """Hosts of recorded requests: 'CONNECT h:443 ...' or 'GET http://h/... ...'."""
        out = set()
        for line in list(self.lines)[since:]:
            parts = line.split()
            target = parts[1] if len(parts) > 1 else line
            target = target.split("://", 1)[-1].split("/", 1)[0]
            out.add(target.rsplit(":", 1)[0] if ":" in target else target)
        return out

    def page_hosts(self, since: int = 0) -> set[str]:
        """Hosts recorded after the ``since``-th connection, Chromium's own services aside."""
        return {h for h in self.hosts(since) if not _service(h)}

    def close(self):
        self._stop = True
        self.sock.close()


def _high(fds: tuple[int, int]) -> tuple[int, int]:
    """The pipe's ends moved above fd 9, so dup2 onto fds 3 and 4 cannot clobber them."""
    out = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return out  # type: ignore[return-value]


class Browser:
    """Minimal DevTools protocol client over --remote-debugging-pipe (fds 3 and 4)."""

    def __init__(self, exe: str, proxy_port: int):
        self.profile = tempfile.mkdtemp(prefix="mass-chromium-")
        to_chrome_r, self._w = _high(os.pipe())
        self._r, from_chrome_w = _high(os.pipe())
        # the browser reads commands on fd 3 and writes replies on fd 4
        args = [exe, *FLAGS, f"--user-data-dir={self.profile}",
                f"--proxy-server=http://127.0.0.1:{proxy_port}",
                "--proxy-bypass-list=<-loopback>", "about:blank"]  # fmt: skip

        def fds_3_and_4():  # dup2 clears close-on-exec on the copies only
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(args, preexec_fn=fds_3_and_4, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._id = 0
        self._replies: dict[int, dict] = {}
        self.events: queue.Queue = queue.Queue()
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        while True:
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._replies[msg["id"]] = msg
                        self._cond.notify_all()
                else:
                    self.events.put(msg)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict:  # fmt: skip
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._id not in self._replies:
                left = deadline - time.monotonic()
                assert left > 0, f"chromium did not answer {method} in {timeout} s"
                self._cond.wait(left)
            reply = self._replies.pop(self._id)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply.get("result", {})

    def open(self, url: str, *, width: int = 1000, height: int = 800) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, session)
        page.call("Network.enable")
        page.call("Page.enable")
        page.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})  # fmt: skip
        page.navigate(url)
        return page

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except AssertionError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session
        self.requests: list[str] = []

    def call(self, method: str, params: dict | None = None) -> dict:
        return self.browser.call(method, params, self.session)

    def _drain(self, until: float, stop_on: str | None = None) -> bool:
        while time.monotonic() < until:
            try:
                ev = self.browser.events.get(timeout=max(until - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if ev.get("sessionId") != self.session:
                continue
            if ev["method"] == "Network.requestWillBeSent":
                self.requests.append(ev["params"]["request"]["url"])
            if stop_on and ev["method"] == stop_on:
                return True
        return False

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})
        assert self._drain(time.monotonic() + 30, "Page.loadEventFired"), f"{url}: no load event"
        self._drain(time.monotonic() + 0.5)  # late requests (lazy images, fonts)

    def eval(self, expression: str):
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        assert "exceptionDetails" not in res, res
        return res["result"].get("value")

    def external_requests(self) -> list[str]:
        self._drain(time.monotonic() + 0.2)
        return [u for u in self.requests if not u.startswith(("file:", "data:", "about:"))]

    def screenshot(self, clip: dict | None = None) -> bytes:
        params = {"format": "png", "captureBeyondViewport": True}
        if clip:
            params["clip"] = {**clip, "scale": 1}
        return base64.b64decode(self.call("Page.captureScreenshot", params)["data"])

    def pdf(self) -> bytes:
        return base64.b64decode(self.call("Page.printToPDF", {})["data"])


@pytest.fixture(scope="module")
def proxy():
    rec = ConnectionRecorder()
    yield rec
    rec.close()


@pytest.fixture(scope="module")
def browser(proxy):
    b = Browser(chromium_path(), proxy.port)
    yield b
    b.close()


N, D = 1600, 24


def _unit(x):
    import numpy as np

    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def write_synthetic(root, *, suppress_leaks: bool = False):
    """Labels (id, emb, s, r) + a one-part release: s lives in dims 0-7, r in 8-15; the
    release zeroes dims 0-7 (s suppressed) unless ``suppress_leaks``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mass.audit.suite import REQUIRED_METADATA
    from mass.embeddings import embedding_array
    from mass.synthetic import block_attributes

    d = block_attributes(N, D)
    s, r, x, ids = d["s"], d["r"], d["x"], d["id"]
    pq.write_table(pa.table({"id": ids, "emb": embedding_array(x), "s": s, "r": r}),
                   root / "labels.parquet")  # fmt: skip
    xp = x.copy()
    if not suppress_leaks:
        xp[:, :8] = 0.0
    meta = dict.fromkeys(REQUIRED_METADATA, "x")
    meta.update({"mass.suppress": '["s"]', "mass.preserve": '["r"]', "mass.forced_columns": "[]",
                 "mass.method": "mass", "mass.model": "mass_modifier",
                 "mass.model_version": "1"})  # fmt: skip
    table = pa.table({"id": ids, "emb": embedding_array(_unit(xp))})
    table = table.replace_schema_metadata({k.encode(): v.encode() for k, v in meta.items()})
    (root / "release").mkdir()
    pq.write_table(table, root / "release" / "part-00000-of-00001.parquet")
    # no mass.modifier metadata: no key view to judge, which the built-in policy refuses
    (root / "params.yaml").write_text(
        "audit:\n  families: [logreg, knn]\n  folds: 3\n  gate_key_compromised: false\n"
    )
    return root / "release", root / "labels.parquet", root / "params.yaml"


@pytest.fixture(scope="session")
def audit_report(tmp_path_factory):
    """A real `mass audit` (CLI, so the report.html hook runs) of a passing release."""
    from mass.cli import main

    root = tmp_path_factory.mktemp("audit")
    release, labels, params = write_synthetic(root)
    report = root / "report"
    rc = main(["audit", "--release", str(release), "--labels", str(labels), "--suppress", "s",
               "--preserve", "r", "--report", str(report), "--params", str(params)])  # fmt: skip
    assert rc == 0
    return report


@pytest.fixture(scope="session")
def synthetic_release():
    """:func:`write_synthetic`, for test modules (conftest is not importable by name)."""
    return write_synthetic
