#!/usr/bin/env python3
"""Serves the web build (build-web/) on 127.0.0.1 with the two headers its threads need, or copies
its files into a folder an instructor hosts (--dist DIR).

The rank threads use SharedArrayBuffer, which a browser allows only on a cross-origin-isolated
page: served with `Cross-Origin-Opener-Policy: same-origin` and
`Cross-Origin-Embedder-Policy: require-corp`. A host that cannot send headers still works through
coi-serviceworker.js (the page registers it and reloads once; it needs https or localhost).
"""
import argparse
import functools
import http.server
import pathlib
import shutil
import sys

FILES = ["index.html", "index.js", "index.wasm", "index.worker.js", "coi-serviceworker.js"]
HEADERS = {"Cross-Origin-Opener-Policy": "same-origin",
           "Cross-Origin-Embedder-Policy": "require-corp"}
HOSTING_NOTE = """mgpu-lab classroom: static files for any web server.

Serve this folder with these two response headers (the rank threads need them):
  Cross-Origin-Opener-Policy: same-origin
  Cross-Origin-Embedder-Policy: require-corp
and .wasm as application/wasm. Where the host cannot send headers (e.g. GitHub Pages), the page
registers coi-serviceworker.js, which adds them, and reloads once (https or localhost only).
URL parameters: ?set=schedule=gpipe,microbatches=16  ?series=microbatches=1..8
  ?versus=gpipe,1f1b  ?lesson=zero&args=--device+phantom+--ranks+4+--stage+3
"""


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".js": "text/javascript"}
    isolation_headers = True  # False: as a host that cannot send them (the service worker's case)

    def end_headers(self):
        for name, value in HEADERS.items() if self.isolation_headers else ():
            self.send_header(name, value)
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, *args):  # quiet: the URL is the one line that matters
        pass


class HostWithoutHeaders(Handler):
    isolation_headers = False


def make_server(folder, port, isolation_headers=True):
    """An HTTP server of `folder` on 127.0.0.1:port (0: any free port); serve_forever() runs it.
    Without the isolation headers it serves as a plain host does: the page then isolates itself
    through coi-serviceworker.js."""
    handler = functools.partial(Handler if isolation_headers else HostWithoutHeaders,
                                directory=str(folder))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


def write_dist(build, dist):
    missing = [f for f in FILES if not (build / f).is_file()]
    if missing:
        sys.exit(f"{build} has no {', '.join(missing)}: ./dev.sh web builds it")
    dist.mkdir(parents=True, exist_ok=True)
    for f in FILES:
        shutil.copy2(build / f, dist / f)
    (dist / "HOSTING.txt").write_text(HOSTING_NOTE)
    print(f"==> wrote {dist}/ ({', '.join(FILES)}, HOSTING.txt: the two headers)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", type=pathlib.Path, help="the web build folder (build-web)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--dist", type=pathlib.Path, help="copy the static files here instead")
    ap.add_argument("--no-headers", action="store_true",
                    help="serve without the two headers, as a plain host does (the page then "
                         "reloads itself once through coi-serviceworker.js)")
    args = ap.parse_args()
    if args.dist:
        write_dist(args.build, args.dist)
        return
    if not (args.build / "index.html").is_file():
        sys.exit(f"{args.build}/index.html not found: ./dev.sh web builds it")
    server = make_server(args.build, args.port, isolation_headers=not args.no_headers)
    print(f"==> the classroom: http://127.0.0.1:{server.server_port}/index.html  (Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
