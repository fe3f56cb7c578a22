#!/usr/bin/env python3
"""The executable-docs harness catches drift: a page showing a real run passes; the same page with
one modeled figure edited fails; a wall-clock figure edited still passes (masked); --update puts
the real figure back; an excerpt (`...`) is checked and regenerated the same way; a figure of
float rounding marked `< BOUND` or `~VALUE` passes within its rule, fails outside it, and keeps
its mark through --update; a prose figure sourced from a named output (a regex, an expression,
a quoted code span, a hidden source) passes, fails with its line when edited by hand, and --update
writes it back; a figure with a unit and no source fails the lint, unless marked constant.

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
import prose  # noqa: E402
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
    check_prose_figures(build, page, real)
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


def prose_page(real):
    """A page whose prose states the run's figures, each with its source (the figures are taken
    from the run here, as --update would write them); and its lines, by role."""
    output = "\n".join(real)
    first, last = re.search(r"loss: (\d+\.\d+) -> (\d+\.\d+)", output).groups()
    step = re.search(r"\((\d+\.\d+ us) per step\)", output).group(1)
    quote = re.search(r"loss: \S+ -> \S+", output).group()
    drop = f"{float(first) - float(last):.4f}"
    ms = f"{float(step.split()[0]) / 1000:.4f} ms"
    lines = {
        "regex": f"The loss falls from {first}<!-- first = run: /loss: {{n}} -> / --> to "
                 f"{last}<!-- last = run: /-> ({{n}}) over/ -->.",
        "expression": f"It drops by {drop}<!-- = first - last | {{:.4f}} --> in two steps.",
        "time": f"A step takes {step}<!-- t = run: /\\(({{t}}) per step/ -->, that is "
                f"{ms}<!-- = ms(t) | {{:.4f}} ms -->.",
        "quote": f"The run ends with `{quote}`<!-- run -->.",
        "hidden": f"A second run says {step}<!-- again: /\\(({{t}}) per step/ --> too.",
        "const": "An H100 has 80 GB<!-- const --> of memory.",
    }
    page = ("# page\n\n<!-- docs: name=run -->\n```\n$ " + COMMAND + "\n...\n" +
            real[-1] + "\n```\n\n<!-- docs: source=again " + COMMAND + " -->\n\n" +
            "\n\n".join(lines.values()) + "\n")
    return page, lines


def check_prose_figures(build, page, real):
    """Prose figures with a source pass; one edited by hand fails, naming its line, and --update
    writes it back; an unsourced figure with a unit fails the lint."""
    text, lines = prose_page(real)

    def write(content):
        with open(page, "w", encoding="utf-8") as f:
            f.write(content)

    def line_of(content, role):
        return content.split("\n").index(lines[role]) + 1

    write(text)
    rc, log = harness(build, page)
    expect(rc == 0, "sourced prose figures pass", log)
    for role in ("regex", "expression", "time", "quote", "hidden"):
        # change the figure right before the role's first source comment, one digit
        line = lines[role]
        at = max(k for k in range(line.index("<!--")) if line[k].isdigit())
        edited_line = line[:at] + ("1" if line[at] != "1" else "2") + line[at + 1:]
        edited = text.replace(line, edited_line)
        write(edited)
        rc, log = harness(build, page)
        where = f"page.md:{line_of(text, role)}: prose figure '"
        expect(rc == 1 and where in log, f"{'an' if role[0] in 'aeiou' else 'a'} {role} figure edited by hand fails at its line", log)
        rc, log = harness(build, "--update", page)
        expect(rc == 0 and open(page, encoding="utf-8").read() == text,
               f"--update writes the {role} figure back", log)
    unsourced = "The step took 12.5 ms once."
    write(text + "\n" + unsourced + "\n")
    rc, log = harness(build, page)
    expect(rc == 1 and "page.md:" in log and "'12.5 ms' has no source" in log,
           "a figure with a unit and no source fails the lint", log)
    write(text + "\n" + unsourced.replace("ms", "ms<!-- const -->") + "\n")
    rc, log = harness(build, page)
    expect(rc == 0, "a figure marked constant passes the lint", log)
    values = [float(prose.Value(t)) for t in ("-1.8%", "error -2.6%", "a-1", "1,234.5 us")]
    expect(values == [-1.8, -2.6, 1.0, 1234.5], "a captured negative figure keeps its sign",
           str(values))


if __name__ == "__main__":
    sys.exit(main())
