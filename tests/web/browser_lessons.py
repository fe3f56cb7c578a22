"""The lessons on the web page against the native `mgpu run`, and the classroom's --versus
(tests/web/run_browser_test.py runs these after the classroom's checks).

Each lesson runs on the page from its picker and arguments field (the Run button), or from the
URL (?lesson=NAME&args=...); the report the page shows must equal, character for character, what
the native `mgpu run NAME ARGS` prints on standard output, and a bad option's line what it prints
on standard error. Every wait polls the page's state (mgpu_status: lesson_runs, frames), with run_browser_test's Page."""
import json
import os
import shlex
import subprocess
import time
import urllib.parse

import png

# Small runs on the phantom device (shapes only, modeled clock): the same figures on any build.
PHANTOM = "--device phantom --steps 2"
LESSONS = [
    ("zero", f"{PHANTOM} --ranks 4 --stage 3"),  # the URL's (?lesson=zero&args=...)
    ("data_parallel", PHANTOM),
    ("ddp", PHANTOM),
    ("pipeline", f"{PHANTOM} --ranks 4 --schedule gpipe --microbatches 8"),
    ("tensor_parallel", PHANTOM),
    ("sequence_parallel", PHANTOM),
    ("context_parallel", PHANTOM),
    ("expert_parallel", f"{PHANTOM} --experts 4"),
    ("hybrid", PHANTOM),
]
# The report panel's background and a light text pixel (web/shell.html's #report).
PANEL, TEXT_MIN = (23, 23, 28), 150


def native_run(mgpu, lesson, args, fail):
    """What the native `mgpu run` prints: standard output and error. Not a terminal, and without
    COLUMNS (the page has neither): the ASCII timeline plain, at its default width."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    run = subprocess.run([mgpu, "run", lesson, *shlex.split(args)], capture_output=True,
                         text=True, timeout=120, env=env)
    if run.returncode not in (0, 2):
        fail(f"native mgpu run {lesson} {args}: exit {run.returncode}: {run.stderr.strip()}")
    return run.stdout, run.stderr


def click_run(browser, lesson, args):
    """What a student does: picks the lesson, types its options, presses Run."""
    browser.evaluate(
        f"document.getElementById('lesson').value = {json.dumps(lesson)};"
        f"document.getElementById('args').value = {json.dumps(args)};"
        "document.getElementById('run').click(); window.mgpuRunAnswer")


def compare_lesson(what, status, native_out, native_err, fail):
    if status["report"] != native_out:
        fail(f"{what}: the page's report differs from the native mgpu run's:\n--- page\n"
             f"{status['report']}--- native\n{native_out}")
    if status["error"] != native_err.rstrip("\n"):
        fail(f"{what}: the page's error line {status['error']!r} is not the native "
             f"{native_err!r}")


def check_report_panel(browser, screenshot, path, fail):
    """The report beside the timeline: the panel's background with light text on the right, the
    timeline's cells on the left."""
    width, height, rows = png.read_png(screenshot)
    left = browser.evaluate("document.getElementById('report').getBoundingClientRect().left")
    left = int(left) + 2
    panel = text = 0
    for row in rows[40::2]:
        for x in range(left * 3, width * 3, 6):
            c = (row[x], row[x + 1], row[x + 2])
            panel += c == PANEL
            text += min(c) >= TEXT_MIN
    if panel < 2000 or text < 500:
        fail(f"the report panel is not drawn right of x={left}: {panel} background and {text} "
             f"text pixels sampled ({path})")
    print(f"ok: report panel drawn ({panel} background, {text} text pixels sampled)", flush=True)


def check_lessons(page, browser, url, mgpu, screenshot, fail, poll_status_line,
                  drawn_while_running):
    # A lesson's link with the classroom's values: refused in one line, not ignored.
    page.navigate(f"{url}?lesson=zero&set=stages=2", "?lesson= and ?set=")
    poll_status_line(browser, "drive the classroom, ?lesson= a lesson: not both", timeout=60)
    print("ok: ?lesson= with ?set=: refused in one line", flush=True)
    lesson, args = LESSONS[0]
    query = urllib.parse.urlencode({"lesson": lesson, "args": args}, quote_via=urllib.parse.quote)
    page.navigate(f"{url}?{query}", "?lesson=")
    started = time.monotonic()
    s = page.wait(f"?{query}", 0, counter="lesson_runs")
    compare_lesson(f"?lesson={lesson}", s, *native_run(mgpu, lesson, args, fail), fail)
    shown = browser.evaluate("[document.getElementById('lesson').value,"
                             " document.getElementById('args').value]")
    if shown != [lesson, args]:
        fail(f"the picker and arguments field show {shown}, not the URL's {[lesson, args]}")
    print(f"ok: ?lesson={lesson}: report as native ({len(s['report'].splitlines())} lines), "
          f"{time.monotonic() - started:.1f} s after the page loaded", flush=True)
    data = screenshot()
    check_report_panel(browser, data, "the lesson screenshot", fail)
    runs = s["lesson_runs"]
    for lesson, args in LESSONS[1:]:
        started = time.monotonic()
        click_run(browser, lesson, args)
        if lesson == "context_parallel":  # the longest run here
            drawn_while_running(page, running="lesson_running")
        s = page.wait(f"Run {lesson} {args}", runs, counter="lesson_runs")
        runs = s["lesson_runs"]
        compare_lesson(lesson, s, *native_run(mgpu, lesson, args, fail), fail)
        if not s["figures"].startswith("run: "):
            fail(f"{lesson}: no trace in the dashboard (figures: {s['figures']!r})")
        print(f"ok: {lesson} {args}: report as native "
              f"({len(s['report'].splitlines())} lines, {time.monotonic() - started:.1f} s)",
              flush=True)
    # Bad input: the native one line; what the browser cannot do: refused in one line.
    for lesson, args, expected in [
            ("zero", "--stage 7", None),
            ("pipeline", "--trace run.json",
             "mgpu run pipeline: error: --trace writes a file, and the page keeps none: it draws "
             "the trace itself (drop it)"),
            ("ddp", "--device cuda", "mgpu run ddp: error: --device cuda needs a GPU"),
            ("nope", "", "mgpu run: error: unknown lesson 'nope' (available: data_parallel, ddp,")]:
        if lesson == "nope":  # not in the picker: as a link's ?lesson=nope asks for it
            page.call("mgpu_run_lesson", lesson, args)
        else:
            click_run(browser, lesson, args)
        s = page.wait(f"Run {lesson} {args}", runs, counter="lesson_runs")
        runs = s["lesson_runs"]
        if expected is None:
            out, err = native_run(mgpu, lesson, args, fail)
            compare_lesson(f"{lesson} {args}", s, out, err, fail)
            expected = err.strip()
        if not s["error"].startswith(expected) or "\n" in s["error"]:
            fail(f"{lesson} {args}: the page says {s['error']!r}, not one line {expected!r}...")
        poll_status_line(browser, s["error"])
        print(f"ok: {lesson} {args}: one line on the page: {s['error']}", flush=True)


def check_versus(page, browser, url, web_figures, fail, compare, poll_status_line):
    """?versus=gpipe,1f1b: two schedules side by side under the same controls, as
    `mgpu viz --versus`; a bad list: its one line."""
    page.navigate(f"{url}?versus=gpipe,1f1b&set=microbatches=8", "?versus=")
    s = page.wait("loading the page with ?versus=", 0)
    native = subprocess.run([web_figures, "--versus", "gpipe,1f1b", "--set", "microbatches=8"],
                            capture_output=True, text=True, timeout=120)
    if native.returncode != 0 or native.stdout.count("run: ") != 2:
        fail(f"web_figures --versus gpipe,1f1b: {native.stderr.strip()}")
    compare("?versus=gpipe,1f1b&set=microbatches=8", s["figures"], native.stdout)
    if page.call("mgpu_versus", "gpipe,bogus") != 2:
        fail("--versus gpipe,bogus was accepted")
    poll_status_line(browser, "--versus: 'bogus' is not a schedule")
    print("ok: a bad --versus list: its one line on the page", flush=True)
