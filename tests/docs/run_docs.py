#!/usr/bin/env python3
"""Executable docs: run every `./build/mgpu` command a page shows and compare its shown output.

Why a small stdlib script rather than a packaged tool: Debian's python3-cram (the closest fit)
reads its own `.t` format (two-space-indented `$ cmd` lines, `(re)`/`(glob)` suffixes on every
line to match), not fenced Markdown. Using it would mean either putting cram's annotations in
front of students on every page or writing a Markdown<->.t converter in both directions (for
checking and for regenerating) -- more code than this file, and a second format to learn.

What a page may contain (fenced blocks, ``` or ```bash):

  * a command block: lines that start with `./build/mgpu` or `mpirun ... ./build/mgpu` (a
    trailing backslash continues a line; other lines are not run, nor a command that opens the
    dashboard's window: `mgpu viz` without `--screenshot`, `--viz`). Each command must exit 0, or
    the status its line's comment states (`# ..., exit code 2`).
  * an output block: the first line is `$ ./build/mgpu ...` (or `$ mpirun ...`), the rest is
    what the command prints (stdout and stderr together), up to the next `$ ` command line if
    the block shows several. A line `...` stands for any number of lines, so a page may show an
    excerpt; without `...` the whole output is shown. A `$` line may end in a comment
    `# exit code 2`: the status that command must exit with.

  An HTML comment on the line just before the fence adds options, e.g.
  `<!-- docs: slow -->` (run by the slow-doc label only), `<!-- docs: exit=2 -->` (expected
  exit status), `<!-- docs: wall -->` (a wall-clock measurement: every figure masked),
  `<!-- docs: skip needs a display -->` (never run; say why). Options combine: `slow wall`.

  An output may be named for the prose: `<!-- docs: name=ddp -->` (`name=off,on`: a block's
  commands in order), or run only for the prose, unshown: `<!-- docs: source=big ./build/mgpu ...
  -->` on a line of its own.

The prose rule (prose.py gives the syntax): every measured or modeled figure a page states
outside its code blocks is followed by an HTML comment naming its source, a regex over a named
output (`1.751 ms<!-- pcie: /step: {t} here/ -->`), an expression over such values
(`2.21x<!-- = ms(a) / ms(b) | {:.2f}x -->`) or a quoted code span (`` `...`<!-- pcie --> ``); it
fails when it differs from what its source gives, and --update rewrites it. A figure with a unit
and no source fails the lint unless marked `<!-- const -->` (a spec, a formula's constant, a
citation; `<!-- docs: const REASON -->` before a paragraph or table: a recorded measurement).
Figures from slow blocks are checked with --slow. No figure is typed by hand: --update writes it.

The comparison rule (docs/architecture.md, "Executable docs", says the same for readers):

  * modeled-clock figures, losses, byte counts ... are compared exactly (they are deterministic);
  * figures of this machine are masked: on a line that says `wall`, `this machine` or `this
    host` (wall-clock times, host memory), and on every line of a command run with
    `--clock wall` or of a block marked `wall`, each number is replaced by `#` on both sides
    and each time by `# s` whatever its unit (`577.348 us` and `1.2 ms` alike), and runs of
    spaces count as one (column widths follow the figures); a line that ends with
    the planner's own run time, `(1.38 s)` or `in 22.5 s`, has that figure masked;
  * figures of float rounding (they depend on how this CPU's BLAS blocks its sums, and on the
    order threads add in): differences between layouts, reduced-precision losses past the digits
    the arithmetic determines, counts of flushed or overflowed values. The page writes such a
    figure with a marker, and the harness compares the run's figure at that place:
      `< 2e-05`   a bound: the run's figure is at most 2e-05 in size (a difference between
                  layouts: its size is the point, its digits are not);
      `~4.1416`   a tolerance: the run's figure is within ROUNDING_RELATIVE of 4.1416 (a loss
                  or a count that rounding moves in its last digits).
    Every other figure on a marked line stays exact, and runs of spaces count as one. The
    tolerance is written once, in compare.py (ROUNDING_RELATIVE), and is never widened for one page;
    `./dev.sh test-portable` re-runs the pages under other BLAS kernels and thread counts to
    find a figure that needs a marker before CI does;
  * file names: commands run in a fresh scratch directory (with `build`, `docs`, ... linked in),
    and that directory's absolute path is replaced by `.` in the output;
  * trailing spaces are ignored.

Usage:
  run_docs.py --build BUILD_DIR [--slow] [--update] PAGE.md...
  --update rewrites the shown outputs and the prose's figures from real runs (keeps each
  excerpt's shape); review the diff and commit it. Exit status 1 if a block or a prose figure
  differs (or could not be regenerated), or the lint finds a figure without a source.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import prose  # beside this file: the prose's figures
# How outputs are compared (the test reads ROUNDING_RELATIVE, WALL_LINE and masked from here).
from compare import (ELLIPSIS, ROUNDING_RELATIVE, WALL_LINE, find_segments,  # noqa: F401
                     masked, regenerated, same_line)

OPTIONS = re.compile(r"^\s*<!--\s*docs:(.*?)-->\s*$")
# A command run only for the prose's figures: `<!-- docs: [slow] source=NAME ./build/mgpu ... -->`.
SOURCE = re.compile(r"^\s*<!--\s*docs:(.*?)\bsource=(\S+) (.*?)\s*-->\s*$")
FENCE = re.compile(r"^```")
RUNNABLE = re.compile(r"^(\./build/mgpu|mpirun\b.*\./build/mgpu)")
# A command that opens the dashboard's window (`mgpu viz` without --screenshot, `--viz`) waits
# for a person: not run.
WINDOW = re.compile(r"^(?!.*--screenshot).*\bmgpu viz\b|--viz\b")
EXIT_COMMENT = re.compile(r"#.*\bexit(?: code)?\s+(\d+)\s*$")


class Block:
    def __init__(self, page, line, commands, expected, options, names=()):
        self.page, self.line = page, line  # line: 1-based line of the first content line
        self.commands = commands  # list of shell command strings
        self.expected = expected  # list of shown output lines, or None (command block)
        self.options = options
        # the names of the commands' outputs, for the prose's figures ("" or none: unnamed)
        self.names = list(names) + [""] * (len(commands) - len(names))

    @property
    def where(self):
        return f"{self.page}:{self.line}"


def parse_options(text):
    opts = {"slow": False, "skip": None, "exit": 0, "wall": False, "name": []}
    for word in text.split():
        if word in ("slow", "wall"):
            opts[word] = True
        elif word.startswith("exit="):
            opts["exit"] = int(word[5:])
        elif word.startswith("name="):
            opts["name"] = word[5:].split(",")
    if text.split() and text.split()[0] == "skip":
        opts["skip"] = text.strip()[4:].strip() or "no reason given"
    return opts


def join_continuations(lines):
    joined, current = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
        else:
            joined.append(current + line)
            current = ""
    if current:
        joined.append(current)
    return joined


def parse_page(path):
    """Returns (blocks, lines) for one Markdown page."""
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        source = SOURCE.match(lines[i])
        if source:  # a command whose output the page does not show, only its prose cites
            options = parse_options(source.group(1))
            blocks.append(Block(path, i + 1, [source.group(3)], None, options, [source.group(2)]))
        if not FENCE.match(lines[i]):
            i += 1
            continue
        opener = i
        end = next((j for j in range(i + 1, len(lines)) if FENCE.match(lines[j])), len(lines))
        body = lines[i + 1 : end]
        m = OPTIONS.match(lines[opener - 1]) if opener > 0 else None
        options = parse_options(m.group(1) if m and not SOURCE.match(lines[opener - 1]) else "")
        names = options["name"]
        if body and body[0].startswith("$ ") and RUNNABLE.match(body[0][2:]):
            # Each `$ command` line starts a command of its own; the lines up to the next are its
            # output.
            starts = [k for k, l in enumerate(body) if l.startswith("$ ") and RUNNABLE.match(l[2:])]
            for n, k in enumerate(starts):
                end_k = starts[n + 1] if n + 1 < len(starts) else len(body)
                blocks.append(Block(path, opener + 2 + k, [body[k][2:]], body[k + 1 : end_k],
                                    options, names[n : n + 1]))
        else:
            commands = [c.strip() for c in join_continuations(body)
                        if RUNNABLE.match(c.strip()) and not WINDOW.search(c)]
            if commands:  # one scratch folder for the block: a line may use an earlier's file
                blocks.append(Block(path, opener + 2, commands, None, options, names))
        i = end + 1
    return blocks, lines


def scratch_dir(source_root, build_dir):
    """A fresh working directory: the source tree's entries linked in, `build` = the build dir."""
    work = tempfile.mkdtemp(prefix="mgpu-docs-")
    for name in os.listdir(source_root):
        if name in ("build", ".git", "out") or name.startswith("build-"):
            continue
        os.symlink(os.path.join(source_root, name), os.path.join(work, name))
    os.symlink(os.path.abspath(build_dir), os.path.join(work, "build"))
    os.mkdir(os.path.join(work, "out"))
    return work


def run_command(command, work):
    env = dict(os.environ)
    # No Open MPI settings here: a page's mpirun block must run as shown, as root on 2 cores too
    # (CI's machine), so the pages carry --allow-run-as-root --oversubscribe themselves.
    env.pop("COLUMNS", None)  # the timeline's width follows it: the pages show the default
    done = subprocess.run(["bash", "-c", command], cwd=work, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
    output = done.stdout.replace(os.path.realpath(work), ".").replace(work, ".")
    return done.returncode, [line.rstrip() for line in output.rstrip("\n").split("\n")]


def diff_report(block, expected, actual, wall_run):
    lines = [f"{block.where}: shown output differs from `{block.commands[0]}`"]
    real = [masked(l, wall_run) for l in actual]
    for line in expected:
        if line.strip() != ELLIPSIS and not any(same_line(line, a, wall_run) for a in actual):
            lines.append(f"  shown, not in the output: {masked(line, wall_run)}")
    lines.append("  real output (masked):")
    lines.extend("    | " + l for l in real)
    return "\n".join(lines)


def check_block(block, work, update, outputs):
    """Runs the block; returns (ok, new_expected_or_None, message). Each named command's output
    goes into outputs[name]."""
    for command, name in zip(block.commands, block.names):
        status, actual = run_command(command, work)
        if name:
            outputs[name] = actual
        wall_run = "--clock wall" in command or block.options["wall"]
        stated = EXIT_COMMENT.search(command)  # a line's own `# ..., exit code 2`
        expected_status = int(stated.group(1)) if stated else block.options["exit"]
        if status != expected_status:
            tail = "\n".join("    | " + l for l in actual[-15:])
            return False, None, (f"{block.where}: `{command}` exited {status}, expected "
                                 f"{expected_status}\n{tail}")
        if block.expected is None:
            continue
        if find_segments(block.expected, actual,
                         lambda a, b: same_line(a, b, wall_run)) is not None:
            return True, None, None
        if update:
            new = regenerated(block.expected, actual)
            if new is None:
                return False, None, (f"{block.where}: cannot regenerate: the excerpt's lines no "
                                     "longer appear in the output; edit the block by hand\n" +
                                     diff_report(block, block.expected, actual, wall_run))
            return True, new, f"{block.where}: regenerated"
        return False, None, diff_report(block, block.expected, actual, wall_run)
    return True, None, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True, help="the build directory holding mgpu")
    parser.add_argument("--source", default=os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))), help="the source root (default: this repo)")
    parser.add_argument("--slow", action="store_true", help="run only the blocks marked slow")
    parser.add_argument("--all", action="store_true", help="run slow and fast blocks")
    parser.add_argument("--update", action="store_true", help="rewrite shown outputs from runs")
    parser.add_argument("pages", nargs="+")
    args = parser.parse_args()
    if not os.path.exists(os.path.join(args.build, "mgpu")):
        print(f"run_docs.py: no mgpu in {args.build}: build it first "
              "(cmake --build build --target mgpu)", file=sys.stderr)
        return 2
    failures = 0
    for page in args.pages:
        failures += check_page(page, args)
    return 1 if failures else 0


def sources_of(blocks):
    """Block name -> None, or why that block's output cannot source a prose figure."""
    sources = {}
    for block in blocks:
        for command, name in zip(block.commands, block.names):
            if name:
                sources[name] = (
                    "named twice" if name in sources else
                    "a skipped block" if block.options["skip"] is not None else
                    "a wall-clock run: quote its figures as constants" if
                    block.options["wall"] or "--clock wall" in command else None)
    return sources


def blocks_to_run(blocks, figures, args):
    """The blocks this mode runs: slow or fast ones (or all), and in the slow mode the named
    fast blocks that a figure needs beside a slow one."""
    chosen = [b for b in blocks if b.options["skip"] is None and
              (args.all or b.options["slow"] == args.slow)]
    if args.slow and not args.all:
        slow = {n for b in chosen for n in b.names if n}
        needed = set().union(*[d for d in prose.dependencies(figures).values() if d & slow])
        chosen = [b for b in blocks if b in chosen or
                  (b.options["skip"] is None and set(b.names) & needed)]
    return chosen


def check_page(page, args):
    """Runs one page's blocks and checks its output blocks and prose figures; returns the number
    of failures."""
    failures = 0
    blocks, lines = parse_page(page)
    figures, lint = prose.parse_figures(page, lines)
    if not args.slow or args.all:
        for message in lint:
            print(message)
        failures += len(lint)
    replacements, outputs = [], {}
    for block in blocks_to_run(blocks, figures, args):
        work = scratch_dir(args.source, args.build)
        started = time.monotonic()
        try:
            ok, new, message = check_block(block, work, args.update, outputs)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        seconds = time.monotonic() - started  # in the log, to see which blocks are slow
        if message:
            print(f"{message} ({seconds:.1f} s)")
        if not ok:
            failures += 1
        if new is not None:
            replacements.append((block, new))
        elif ok:
            print(f"{block.where}: ok ({seconds:.1f} s)")
        sys.stdout.flush()
    errors, drifts = prose.check(lines, figures, outputs, sources_of(blocks))
    for message in errors:
        print(message)
    for *_, message in drifts:
        print(message + (": rewritten" if args.update else ""))
    failures += len(errors) + (0 if args.update else len(drifts))
    if args.update:
        prose.apply(lines, drifts)  # before the blocks: they may change the lines' count
    for block, new in sorted(replacements, key=lambda r: -r[0].line):
        first = block.line  # the `$ cmd` line (0-based index block.line - 1)
        lines[first : first + len(block.expected)] = new
    if replacements or (args.update and drifts):
        with open(page, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
    return failures


if __name__ == "__main__":
    sys.exit(main())
