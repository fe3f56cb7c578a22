"""Headless Chromium driven over the DevTools protocol, with the standard library only: the
browser is started with --remote-debugging-port=0, its page target found through /json/list, and
commands go over a WebSocket (RFC 6455, the few lines a client needs: text frames, masked)."""
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request

# Headless WebGL2 without a GPU: ANGLE on SwiftShader (software), which Chromium allows only when
# asked. --no-sandbox: CI runs as root.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--use-gl=angle", "--use-angle=swiftshader",
                  "--enable-unsafe-swiftshader", "--no-first-run", "--no-default-browser-check",
                  "--disable-extensions", "--hide-scrollbars", "--mute-audio"]


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class WebSocket:
    def __init__(self, url, timeout):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the WebSocket handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:200]!r}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text):
        data = text.encode()
        header = bytes([0x81])
        if len(data) < 126:
            header += bytes([0x80 | len(data)])
        elif len(data) < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(data))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(data))
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def receive(self):
        """The next whole message's text (continuation frames joined; pings answered)."""
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("the browser closed the DevTools connection")
            if opcode == 0x9:  # ping: pong with its payload
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            message += payload
            if b0 & 0x80:
                return message.decode()


class Browser:
    """One headless Chromium with one page; call(method, params) returns the command's result."""

    def __init__(self, chromium, width, height, timeout=30):
        self.profile = tempfile.mkdtemp(prefix="mgpu-chromium-")
        self.proc = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--window-size={width},{height}",
             f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = None
        deadline = time.monotonic() + timeout
        seen = []
        while port is None:
            line = self.proc.stderr.readline()
            if not line and (self.proc.poll() is not None or time.monotonic() > deadline):
                raise RuntimeError("chromium did not start its DevTools server:\n" + "".join(seen))
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            port = int(m.group(1)) if m else None
        # Keep reading its messages (a full pipe would stall the browser); the last few explain
        # a crash.
        self.log = seen[-20:]
        threading.Thread(target=self._drain, daemon=True).start()
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = WebSocket(page["webSocketDebuggerUrl"], timeout)
        self.next_id = 0
        self.events = []
        # The page's viewport exactly (the window's size includes what headless keeps for chrome).
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def _drain(self):
        for line in self.proc.stderr:
            self.log = (self.log + [line])[-20:]

    def call(self, method, params=None):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def evaluate(self, expression, await_promise=False):
        """The expression's value in the page (JSON-able), or RuntimeError with the exception."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": await_promise})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise RuntimeError(f"page: {text}")
        return result["result"].get("value")

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
