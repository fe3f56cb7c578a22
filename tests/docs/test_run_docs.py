#!/usr/bin/env python3
"""The executable-docs harness catches drift: a page showing a real run passes; the same page with
one modeled figure edited fails; a wall-clock figure edited still passes (masked); --update puts
the real figure back; an excerpt (`...`) is checked and regenerated the same way; a figure of
float rounding marked `< BOUND` or `~VALUE` passes within its rule, fails outside it, and keeps
its mark through --update.

Usage: test_run_docs.py --build BUILD_DIR
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_docs  # noqa: E402

# Fast, and its output has both kinds of figure: modeled (losses, step time) and wall clock.
COMMAND = "./build/mgpu run single_device --steps 2 --dim 32 --heads 2 --layers 1 --seq 16 --batch 4"


def harness(build, page, *extra):
    done = subprocess.run([sys.executable, os.path.join(HERE, "run_docs.py"), "--build", build,
                           *extra, page], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    return done.returncode, done.stdout


def write_page(path, output_lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("# page\n\n```\n$ " + COMMAND + "\n" + "\n".join(output_lines) + "\n```\n")


def edit_first_figure(lines, want_wall):
    """A copy of `lines` with one digit changed on the first line with a figure that is (or is
    not) a wall-clock line; and the index of that line."""
    for i, line in enumerate(lines):
        wall = bool(run_docs.WALL_LINE.search(line))
        m = re.search(r"\d", line)
        if m and wall == want_wall:
            digit = "1" if m.group() != "1" else "2"
            edited = list(lines)
            edited[i] = line[: m.start()] + digit + line[m.end():]
            return edited, i
    raise AssertionError(f"no {'wall-clock' if want_wall else 'modeled'} figure in the output")


def expect(condition, what, log):
    if not condition:
        print(f"FAILED: {what}\n{log}")
        sys.exit(1)
    print(f"ok: {what}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    build = parser.parse_args().build
    work = run_docs.scratch_dir(run_docs.os.path.dirname(os.path.dirname(HERE)), build)
    status, real = run_docs.run_command(COMMAND, work)
    expect(status == 0, f"`{COMMAND}` runs", "\n".join(real))
    page = os.path.join(tempfile.mkdtemp(prefix="mgpu-docs-test-"), "page.md")

    write_page(page, real)
    rc, log = harness(build, page)
    expect(rc == 0, "the real output passes", log)

    edited, _ = edit_first_figure(real, want_wall=False)
    write_page(page, edited)
    rc, log = harness(build, page)
    expect(rc == 1, "an edited modeled figure fails", log)
    rc, log = harness(build, "--update", page)
    # (the wall-clock figures are those of the update's own run: compared masked)
    regenerated = run_docs.parse_page(page)[0][0].expected
    expect(rc == 0 and [run_docs.masked(l, False) for l in regenerated] ==
           [run_docs.masked(l, False) for l in real], "--update puts the real figure back", log)

    edited, _ = edit_first_figure(real, want_wall=True)
    write_page(page, edited)
    rc, log = harness(build, page)
    expect(rc == 0, "an edited wall-clock figure is masked", log)

    _, line = edit_first_figure(real, want_wall=False)
    excerpt = ["...", real[line], "..."]
    write_page(page, excerpt)
    rc, log = harness(build, page)
    expect(rc == 0, "an excerpt of the real output passes", log)
    write_page(page, ["...", edit_first_figure([real[line]], want_wall=False)[0][0], "..."])
    rc, log = harness(build, page)
    expect(rc == 1, "an excerpt with an edited figure fails", log)
    rc, log = harness(build, "--update", page)
    expect(rc == 0 and run_docs.parse_page(page)[0][0].expected == excerpt,
           "--update regenerates the excerpt, keeping its shape", log)
    check_rounding_marks(build, page, real)
    run_docs.shutil.rmtree(work, ignore_errors=True)
    run_docs.shutil.rmtree(os.path.dirname(page), ignore_errors=True)
    return 0


def marked_loss_line(real, mark):
    """The run's loss line, `loss: A -> B over ...`, with its first loss rewritten by `mark`
    (a function of the loss's value returning the page's marked figure); and the line's index."""
    for i, line in enumerate(real):
        m = re.match(r"(loss: )(\d+\.\d+)( -> .*)", line)
        if m:
            return m.group(1) + mark(float(m.group(2))) + m.group(3), i
    raise AssertionError("no `loss: A -> B` line in the output")


def check_rounding_marks(build, page, real):
    """A figure of float rounding marked `< BOUND` or `~VALUE` (run_docs.ROUNDING_RELATIVE)
    matches the run's figure by its rule; outside the rule it fails; --update keeps the mark."""
    tolerance = run_docs.ROUNDING_RELATIVE
    cases = [  # (page's figure given the run's loss, passes?, what)
        (lambda v: f"< {v * 1.001:.6g}", True, "a bound the run's figure is under passes"),
        (lambda v: f"< {v * 0.9:.6g}", False, "a bound the run's figure exceeds fails"),
        (lambda v: f"~{v * (1 + tolerance / 2):.6f}", True, "a ~figure within tolerance passes"),
        (lambda v: f"~{v * (1 + tolerance * 2):.6f}", False, "a ~figure past tolerance fails"),
    ]
    for mark, passes, what in cases:
        line, i = marked_loss_line(real, mark)
        write_page(page, ["...", line, "..."])
        rc, log = harness(build, page)
        expect(rc == (0 if passes else 1), what, log)
    line, i = marked_loss_line(real, lambda v: f"~{v * (1 + tolerance / 2):.6f}")
    # A block that fails elsewhere is regenerated; its marked line, still within rounding, stays.
    edited, k = edit_first_figure(real[i + 1 :], want_wall=False)
    write_page(page, ["...", line, "...", edited[k], "..."])
    rc, log = harness(build, "--update", page)
    expect(rc == 0 and run_docs.parse_page(page)[0][0].expected == ["...", line, "...",
                                                                    real[i + 1 + k], "..."],
           "--update keeps a rounding mark the run satisfies", log)


if __name__ == "__main__":
    sys.exit(main())
