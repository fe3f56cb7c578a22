#!/usr/bin/env python3
"""The web page against the native build, in headless Chromium (ctest label `web`).

Builds build-web/ (a no-op when it is up to date), serves it with the two headers, loads the page
with ?set=..., and for a list of classroom settings compares the figures the page prints with
what the native build prints for the same settings (tests/web/web_figures.cpp), exactly. Then it
moves a control (what a slider does), checks that a bad value gets its one line on the page,
takes a screenshot and checks its pixels (the timeline's forward and backward colours), and drops
a trace file written by `mgpu run` onto the page. Then the lessons (tests/web/browser_lessons.py):
each one's report on the page against the native `mgpu run`'s, bad options' one line, a screenshot
with the report panel; the classroom's ?versus=; and last the page served without the two headers,
which must isolate itself through its service worker and run. Every wait polls a state the page
reports (mgpu_status: a generation and a frame count), with a deadline and a message saying what
did not happen.

Without a web build or a browser it cannot run: it says so and exits 77 (ctest: skipped), unless
MGPU_WEB_REQUIRED=1 (`./dev.sh test` sets it), where that is a failure.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "web")]
import browser_lessons  # noqa: E402
import cdp  # noqa: E402
import png  # noqa: E402
import serve  # noqa: E402

WIDTH, HEIGHT = 1280, 800
# Settings compared with the native build (the first is the URL's ?set=).
SETTINGS = [
    "schedule=1f1b,stages=4,microbatches=8",
    "schedule=gpipe,stages=4,microbatches=8",
    "schedule=interleaved,stages=4,microbatches=8,virtual_stages=2",
    "schedule=1f1b,stages=2,microbatches=4,profile=DGX-A100",
]
# The timeline's forward and backward cells (viz/palette.cpp, the dark theme).
FORWARD, BACKWARD = (77, 144, 235), (240, 150, 50)


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def cannot_run(message):
    if os.environ.get("MGPU_WEB_REQUIRED") == "1":
        fail(f"{message} (MGPU_WEB_REQUIRED=1: the web test must run here)")
    print(f"SKIPPED (not passed): {message}", flush=True)
    sys.exit(77)


class Page:
    def __init__(self, browser):
        self.browser = browser
        self.generation = 0

    def status(self):
        return self.browser.evaluate(
            "window.mgpuStarted ? Module.ccall('mgpu_status', 'string', [], []) : null")

    def wait(self, what, after, timeout=60, counter="generation"):
        """The status once the page shows a `counter` (a run's generation, or lesson_runs: the
        lesson runs shown, a failed one too) after `after`, drawn 3 times."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            text = self.status()
            last = json.loads(text) if text else None
            if last and last[counter] > after and last["frames"] >= 3:
                self.generation = last["generation"]
                return last
            if counter == "generation" and last and (last["error"] or last["rerun_error"]):
                fail(f"{what}: the page says: {last['error'] or last['rerun_error']}")
            time.sleep(0.1)
        log = self.browser.evaluate("window.mgpuLog ? window.mgpuLog.slice(-10).join('\\n') : ''")
        fail(f"{what}: nothing new drawn within {timeout} s (last state: {last}; page log: {log})")

    def navigate(self, url, what):
        """Loads `url` in place of the page shown, once the new page is the one answering."""
        self.browser.evaluate("window.mgpuOldPage = true")
        self.browser.call("Page.navigate", {"url": url})
        deadline = time.monotonic() + 30
        while self.browser.evaluate("window.mgpuOldPage === true"):
            if time.monotonic() > deadline:
                fail(f"the page with {what} did not replace the previous one within 30 s")
            time.sleep(0.05)
        self.generation = 0

    def call(self, function, *args):
        types = json.dumps(["number" if isinstance(a, int) else "string" for a in args])
        return self.browser.evaluate(
            f"Module.ccall({json.dumps(function)}, 'number', {types}, {json.dumps(list(args))})")


def native_figures(web_figures, settings):
    run = subprocess.run([web_figures, "--set", settings], capture_output=True, text=True,
                         timeout=120)
    if run.returncode != 0:
        fail(f"web_figures --set {settings}: {run.stderr.strip()}")
    return run.stdout


def compare(what, page_figures, native):
    if page_figures != native:
        fail(f"{what}: the page's figures differ from the native build's:\n--- page\n"
             f"{page_figures}--- native\n{native}")
    print(f"ok: {what}: {native.splitlines()[1]}", flush=True)


def check_pixels(data, shot_path):
    width, height, rows = png.read_png(data)
    colours = set()
    counts = {FORWARD: 0, BACKWARD: 0}
    for row in rows[::2]:
        for x in range(0, width * 3, 6):
            c = (row[x], row[x + 1], row[x + 2])
            colours.add(c)
            if c in counts:
                counts[c] += 1
    if len(colours) < 20:
        fail(f"the screenshot is (nearly) blank: {len(colours)} colours ({shot_path})")
    for name, colour in (("forward", FORWARD), ("backward", BACKWARD)):
        if counts[colour] < 200:
            fail(f"the screenshot has no {name} cells (rgb{colour}: {counts[colour]} pixels) "
                 f"({shot_path})")
    print(f"ok: screenshot {width}x{height}: {len(colours)} colours, forward "
          f"{counts[FORWARD]} and backward {counts[BACKWARD]} sampled pixels", flush=True)


def drawn_while_running(page, timeout=60, running="running"):
    """The page keeps drawing while a re-run (or a lesson: running="lesson_running") runs on its
    own thread (web/page.cpp): the frame count grows between two looks at a running page."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        s = json.loads(page.status())
        if not s[running]:
            break
        seen.append(s["frames"])
        time.sleep(0.05)
    if len(seen) >= 2 and seen[-1] <= seen[0]:
        fail(f"the page drew no frame during a re-run (frame counts seen: {seen})")
    print(f"ok: frames drawn during the re-run: {seen[-1] - seen[0] if seen else 0} "
          f"(looked {len(seen)} times while it ran)", flush=True)


def check_series(page, browser, url, web_figures):
    """?set= and ?series= from the URL: the series' first value, then its next with the > button's
    call, each the native build's figures."""
    page.navigate(f"{url}?set=stages=2&series=microbatches=1,2,4", "?series=")
    s = page.wait("loading the page with ?series=", 0)
    if s["series"] != {"name": "microbatches", "value": 1, "step": 1, "steps": 3}:
        fail(f"?series=microbatches=1,2,4 shows {s['series']}")
    compare("?set=stages=2&series=microbatches=1,2,4", s["figures"],
            native_figures(web_figures, "stages=2,microbatches=1"))
    if page.call("mgpu_series_step", 1) != 0:
        fail(f"the series' next value: {page.status()}")
    s = page.wait("the series' next value", page.generation)
    compare("the series' next value (microbatches=2)", s["figures"],
            native_figures(web_figures, "stages=2,microbatches=2"))
    poll_status_line(browser, "series microbatches = 2 (2 of 3)")


def poll_status_line(browser, text, timeout=10):
    """The page's status line once it shows `text` (it refreshes every 250 ms: web/shell.html)."""
    deadline = time.monotonic() + timeout
    bar = ""
    while time.monotonic() < deadline:
        bar = browser.evaluate("document.getElementById('bar').textContent")
        if text in bar:
            return bar
        time.sleep(0.05)
    fail(f"the page's status line does not say '{text}' within {timeout} s (it says {bar!r})")


def screenshot(browser, path):
    data = __import__("base64").b64decode(
        browser.call("Page.captureScreenshot", {"format": "png"})["data"])
    path.write_bytes(data)
    return data


def drop_files(browser, files):
    """Drops these {name: text} files on the page together; the page's answer (0: opened)."""
    adds = "".join(f" dt.items.add(new File([{json.dumps(text)}], {json.dumps(name)}));"
                   for name, text in files.items())
    return browser.evaluate(
        f"(() => {{ const dt = new DataTransfer();{adds}"
        " document.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true}));"
        " return window.mgpuDropped; })()", await_promise=True)


def drop_kineto(page, browser, source):
    """A PyTorch profiler run (two ranks' files, tests/data/kineto/gloo-cpu) dropped together."""
    folder = source / "tests" / "data" / "kineto" / "gloo-cpu"
    files = {p.name: p.read_text() for p in sorted(folder.glob("rank-*.json"))}
    if drop_files(browser, files) != 0:
        fail(f"the dropped PyTorch profiler files were refused: {page.status()}")
    s = page.wait("dropping two PyTorch profiler files", page.generation)
    ranks = [line for line in s["figures"].splitlines() if line.startswith("rank ")]
    if len(ranks) != len(files):
        fail(f"the dropped profiler run shows {len(ranks)} ranks, not {len(files)}:\n{s['figures']}")
    print(f"ok: dropped PyTorch profiler run shown: {ranks[0]}", flush=True)


def drop_trace(page, browser, mgpu, tmp):
    trace = tmp / "gpipe-dropped.json"
    run = subprocess.run([mgpu, "run", "pipeline", "--ranks", "4", "--schedule", "gpipe",
                          "--microbatches", "8", "--trace", str(trace)],
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        fail(f"mgpu run pipeline --trace: {run.stderr.strip()}")
    if drop_files(browser, {"gpipe-dropped.json": trace.read_text()}) != 0:
        fail(f"the dropped trace was refused: {page.status()}")
    s = page.wait("dropping a trace file", page.generation)
    first = s["figures"].splitlines()[0]
    if "gpipe" not in first or "4 GPUs" not in first:
        fail(f"the dropped trace is not the one shown: {first}")
    print(f"ok: dropped trace shown: {first}", flush=True)


def check_service_worker(page, browser, web_build):
    """A host without the two headers (serve.py --no-headers): the page registers
    coi-serviceworker.js, reloads itself once through it, and is then cross-origin isolated and
    runs (its rank threads need that)."""
    server = serve.make_server(web_build, 0, isolation_headers=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    started = time.monotonic()
    browser.call("Page.navigate",
                 {"url": f"http://127.0.0.1:{server.server_port}/index.html?set=stages=2"})
    deadline = started + 90
    state = None
    while time.monotonic() < deadline:
        try:
            state = browser.evaluate(
                "({isolated: window.crossOriginIsolated, reloaded: sessionStorage.getItem("
                "'mgpuReloaded'), controlled: !!navigator.serviceWorker.controller,"
                " status: window.mgpuStarted ? Module.ccall('mgpu_status', 'string', [], []) : null})")
        except RuntimeError:  # between the two loads
            state = None
        if state and state["isolated"] and state["status"]:
            s = json.loads(state["status"])
            if s["generation"] > 0 and s["frames"] >= 3 and "2 GPUs" in s["figures"]:
                break
        time.sleep(0.1)
    else:
        fail(f"served without the headers, the page did not isolate itself through its service "
             f"worker and run within 90 s (last state: {state})")
    server.shutdown()
    if not state["controlled"] or state["reloaded"] != "1":
        fail(f"the isolated page is not the service worker's reload: {state}")
    print(f"ok: served without the two headers: reloaded through coi-serviceworker.js, "
          f"crossOriginIsolated, a run drawn {time.monotonic() - started:.1f} s after navigating",
          flush=True)


def run(args, tmp):
    browser = cdp.Browser(args.chromium, WIDTH, HEIGHT)
    try:
        server = serve.make_server(args.web_build, 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_port}/index.html"
        page = Page(browser)
        started = time.monotonic()
        browser.call("Page.navigate", {"url": f"{url}?set={SETTINGS[0]}"})
        s = page.wait("loading the page", 0, timeout=args.timeout)
        print(f"ok: first frame {time.monotonic() - started:.1f} s after navigating", flush=True)
        compare(f"?set={SETTINGS[0]}", s["figures"], native_figures(args.web_figures, SETTINGS[0]))
        for settings in SETTINGS[1:]:
            if page.call("mgpu_set", settings) != 0:
                fail(f"mgpu_set {settings}: {page.status()}")
            s = page.wait(f"set {settings}", page.generation)
            compare(settings, s["figures"], native_figures(args.web_figures, settings))
        # A control moved, as its slider does: the lesson re-runs with the other values kept.
        page.call("mgpu_set", SETTINGS[0])
        page.wait("back to the first settings", page.generation)
        if page.call("mgpu_move", "microbatches", "16") != 0:
            fail(f"moving microbatches to 16: {page.status()}")
        drawn_while_running(page)
        s = page.wait("microbatches moved to 16", page.generation)
        compare("microbatches slider to 16", s["figures"],
                native_figures(args.web_figures, SETTINGS[0] + ",microbatches=16"))
        data = screenshot(browser, args.screenshot)
        check_pixels(data, args.screenshot)
        # A bad value: one line on the page, the classroom still there.
        if page.call("mgpu_set", "microbatches=99") != 2:
            fail("microbatches=99 was accepted")
        bar = poll_status_line(browser, "microbatches=99 is not a whole number from 1 to 32")
        print(f"ok: bad value shown: {bar}", flush=True)
        drop_trace(page, browser, args.mgpu, tmp)
        drop_kineto(page, browser, HERE.parents[1])
        check_series(page, browser, url, args.web_figures)
        browser_lessons.check_versus(page, browser, url, args.web_figures, fail, compare,
                                     poll_status_line)
        browser_lessons.check_lessons(page, browser, url, args.mgpu,
                                      lambda: screenshot(browser, args.lesson_screenshot), fail,
                                      poll_status_line, drawn_while_running)
        check_service_worker(page, browser, args.web_build)
    finally:
        browser.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--web-build", type=pathlib.Path, required=True)
    ap.add_argument("--web-figures", required=True, help="the native tests/web/web_figures")
    ap.add_argument("--mgpu", required=True, help="the native mgpu (writes the dropped trace)")
    ap.add_argument("--screenshot", type=pathlib.Path, default=pathlib.Path("web-classroom.png"))
    ap.add_argument("--lesson-screenshot", type=pathlib.Path,
                    default=pathlib.Path("web-lesson.png"))
    ap.add_argument("--timeout", type=float, default=90, help="seconds for the first frame")
    args = ap.parse_args()
    if not (args.web_build / "CMakeCache.txt").is_file():
        cannot_run(f"no web build in {args.web_build} (./dev.sh web builds it)")
    args.chromium = cdp.find_chromium()
    if not args.chromium:
        cannot_run("no chromium (apt-get install chromium)")
    started = time.monotonic()
    build = subprocess.run(["cmake", "--build", str(args.web_build), "-j2"],
                           capture_output=True, text=True,
                           env={**os.environ, "NODE_PATH": "/usr/share/nodejs"})
    if build.returncode != 0:
        fail(f"the web build failed:\n{build.stdout[-3000:]}{build.stderr[-3000:]}")
    print(f"ok: web build up to date ({time.monotonic() - started:.1f} s)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        run(args, pathlib.Path(tmp))
    print(f"PASS ({time.monotonic() - started:.1f} s, the build's check included)", flush=True)


if __name__ == "__main__":
    main()
