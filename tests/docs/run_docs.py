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
    tolerance is written once, below (ROUNDING_RELATIVE), and is never widened for one page;
    `./dev.sh test-portable` re-runs the pages under other BLAS kernels and thread counts to
    find a figure that needs a marker before CI does;
  * file names: commands run in a fresh scratch directory (with `build`, `docs`, ... linked in),
    and that directory's absolute path is replaced by `.` in the output;
  * trailing spaces are ignored.

Usage:
  run_docs.py --build BUILD_DIR [--slow] [--update] PAGE.md...
  --update rewrites the shown outputs from real runs (keeps each excerpt's shape); review the
  diff and commit it. Exit status 1 if a block differs (or could not be regenerated).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# A figure as the programs print it: 1,234 / 0.5 / 9.43e-06.
FIGURE = r"\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
NUMBER = re.compile(FIGURE)
WALL_LINE = re.compile(r"\bwall\b|this machine|this host")
# The planner's own run time at the end of a line: "... (1.38 s)", "..., in 22.5 s" (the
# modeled figures on the same line stay exact).
WALL_SECONDS = re.compile(r"(\(|\bin )[0-9]+(\.[0-9]+)? s(\)?)$")
# A time with its unit, on a masked line: "577.348 us", "1.2 ms", "3 s" (not "GB/s").
WALL_TIME = re.compile(FIGURE + r" ?(?:ns|us|µs|ms|s)\b")
# Figures of float rounding, marked on the page (see the module docstring): `< BOUND` and
# `~VALUE`. A marked figure matches a run's figure (NUMBER, maybe signed) at the same place.
SIGNED_NUMBER = f"(-?{FIGURE})"
ROUNDING_MARK = re.compile(r"(<|~) ?" + SIGNED_NUMBER)
# How far a `~VALUE` figure may move, relative to VALUE: 1%. Rounding differences between BLAS
# kernel sets move fp16/bf16 losses after tens of steps in the third or fourth significant digit
# (./dev.sh test-portable measures it); a wrong result (a bug, a changed option) moves them by far
# more. One tolerance for every page: never widened for one figure.
ROUNDING_RELATIVE = 0.01
OPTIONS = re.compile(r"^\s*<!--\s*docs:(.*?)-->\s*$")
FENCE = re.compile(r"^```")
RUNNABLE = re.compile(r"^(\./build/mgpu|mpirun\b.*\./build/mgpu)")
ELLIPSIS = "..."
# A command that opens the dashboard's window (`mgpu viz` without --screenshot, `--viz`) waits
# for a person: not run.
WINDOW = re.compile(r"^(?!.*--screenshot).*\bmgpu viz\b|--viz\b")
EXIT_COMMENT = re.compile(r"#.*\bexit(?: code)?\s+(\d+)\s*$")


class Block:
    def __init__(self, page, line, commands, expected, options):
        self.page, self.line = page, line  # line: 1-based line of the first content line
        self.commands = commands  # list of shell command strings
        self.expected = expected  # list of shown output lines, or None (command block)
        self.options = options

    @property
    def where(self):
        return f"{self.page}:{self.line}"


def parse_options(text):
    opts = {"slow": False, "skip": None, "exit": 0, "wall": False}
    for word in text.split():
        if word in ("slow", "wall"):
            opts[word] = True
        elif word.startswith("exit="):
            opts["exit"] = int(word[5:])
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
        if not FENCE.match(lines[i]):
            i += 1
            continue
        opener = i
        end = next((j for j in range(i + 1, len(lines)) if FENCE.match(lines[j])), len(lines))
        body = lines[i + 1 : end]
        m = OPTIONS.match(lines[opener - 1]) if opener > 0 else None
        options = parse_options(m.group(1) if m else "")
        if body and body[0].startswith("$ ") and RUNNABLE.match(body[0][2:]):
            # Each `$ command` line starts a command of its own; the lines up to the next are its
            # output.
            starts = [k for k, l in enumerate(body) if l.startswith("$ ") and RUNNABLE.match(l[2:])]
            for n, k in enumerate(starts):
                end_k = starts[n + 1] if n + 1 < len(starts) else len(body)
                blocks.append(Block(path, opener + 2 + k, [body[k][2:]], body[k + 1 : end_k],
                                    options))
        else:
            commands = [c.strip() for c in join_continuations(body)
                        if RUNNABLE.match(c.strip()) and not WINDOW.search(c)]
            if commands:  # one scratch folder for the block: a line may use an earlier's file
                blocks.append(Block(path, opener + 2, commands, None, options))
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
    # mpirun refuses root and more processes than cores unless told; CI runs as root on 2 cores.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.pop("COLUMNS", None)  # the timeline's width follows it: the pages show the default
    done = subprocess.run(["bash", "-c", command], cwd=work, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
    output = done.stdout.replace(os.path.realpath(work), ".").replace(work, ".")
    return done.returncode, [line.rstrip() for line in output.rstrip("\n").split("\n")]


def masked(line, wall_run):
    line = WALL_SECONDS.sub(r"\1# s\3", line.rstrip())
    if wall_run or WALL_LINE.search(line):
        # A time's unit follows its size (577 us on one run, 1.2 ms on a loaded one): a time
        # becomes `# s` whatever its unit. Column widths follow the figures, so runs of spaces
        # count as one on a masked line.
        line = WALL_TIME.sub("# s", line)
        return re.sub(r" +", " ", NUMBER.sub("#", line))
    return line


def figure_value(text):
    return float(text.replace(",", ""))


def within_rounding(mark, shown, real):
    """Whether the run's figure `real` satisfies the page's marked figure (`<` bound or `~`)."""
    shown_value, real_value = figure_value(shown), figure_value(real)
    if mark == "<":
        return abs(real_value) <= shown_value
    return abs(real_value - shown_value) <= ROUNDING_RELATIVE * abs(shown_value)


def rounding_match(shown, real):
    """Whether a page line with rounding marks matches a line of the run: the text between the
    marks exactly (runs of spaces as one), each marked figure by its rule. False for a line
    without marks."""
    marks = list(ROUNDING_MARK.finditer(shown.rstrip()))
    if not marks:
        return False

    def literal(text):  # the text between marks, with runs of spaces as one
        return " +".join(re.escape(piece) for piece in re.split(r" +", text))

    pattern, cursor = "", 0
    for m in marks:
        pattern += literal(shown[cursor : m.start()]) + SIGNED_NUMBER
        cursor = m.end()
    pattern += literal(shown.rstrip()[cursor:])
    found = re.fullmatch(pattern, real.rstrip())
    return bool(found) and all(within_rounding(m.group(1), m.group(2), found.group(k + 1))
                               for k, m in enumerate(marks))


def same_line(shown, real, wall_run):
    """A shown line agrees with a line of the run: exactly after masking, or by its rounding
    marks."""
    return masked(shown, wall_run) == masked(real, wall_run) or rounding_match(shown, real)


def skeleton(line):
    return NUMBER.sub("#", line.rstrip())


def loose(line):
    """The skeleton with runs of spaces as one: column widths follow the figures."""
    return re.sub(" +", " ", skeleton(line))


def segments(expected):
    """Splits shown output at `...` lines: (anchored_start, [segment, ...], anchored_end)."""
    parts, current = [], []
    for line in expected:
        if line.strip() == ELLIPSIS:
            parts.append(current)
            current = []
        else:
            current.append(line)
    parts.append(current)
    start_free, end_free = parts[0] == [], parts[-1] == []
    return (not start_free, [p for p in parts if p], not end_free, len(parts) > 1)


def find_segments(expected, actual, same):
    """Positions in `actual` where each segment starts (same order), or None if one is missing.
    same(shown_line, actual_line) says whether two lines agree."""
    anchored_start, parts, anchored_end, elided = segments(expected)
    if not elided:  # the whole output is shown (an empty block: no output)
        shown = parts[0] if parts else []
        real = [] if actual == [""] else actual
        agree = len(shown) == len(real) and all(same(a, b) for a, b in zip(shown, real))
        return [0] if agree else None
    positions, cursor = [], 0
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        candidates = range(cursor, len(actual) - len(part) + 1)
        if n == 0 and anchored_start:
            candidates = [0]
        if last and anchored_end:
            candidates = [len(actual) - len(part)]
        hit = next((p for p in candidates if p >= cursor and all(
            same(part[k], actual[p + k]) for k in range(len(part)))), None)
        if hit is None:
            return None
        positions.append(hit)
        cursor = hit + len(part)
    return positions


def regenerated(expected, actual):
    """The shown output rewritten from `actual`, keeping the excerpt's shape and the page's
    rounding marks where the run still satisfies them; None if the shape (numbers masked) no
    longer appears in the output."""
    new = shaped(expected, actual)
    if new is None:
        return None
    marked = [line for line in expected if ROUNDING_MARK.search(line)]
    return [next((m for m in marked if rounding_match(m, line)), line) for line in new]


def shaped(expected, actual):
    anchored_start, parts, anchored_end, elided = segments(expected)
    if not elided:
        return list(actual)
    positions = find_segments(expected, actual, lambda a, b: skeleton(a) == skeleton(b) or
                              rounding_match(a, b))
    if positions is None:
        return reexcerpted(expected, actual)
    result = []
    if not anchored_start:
        result.append(ELLIPSIS)
    for n, (part, pos) in enumerate(zip(parts, positions)):
        if n > 0:
            result.append(ELLIPSIS)
        result.extend(actual[pos : pos + len(part)])
    if not anchored_end:
        result.append(ELLIPSIS)
    return result


def reexcerpted(expected, actual):
    """When lines were added or removed inside an excerpt: each shown line is found again by its
    start (its first 8 characters as they are, its first 40 -- or else 14 -- with numbers
    masked), in order, and `...` marks the gaps. None if a shown line is not found."""
    shown = [l for l in expected if l.strip() != ELLIPSIS]
    picked, cursor = [], 0
    for line in shown:
        hit = None
        for width in (40, 14):  # 14: a timeline row ("GPU 0 compute|") whose drawing changed
            head, key = line[:8], loose(line.rstrip(". "))[:width]
            hit = next((k for k in range(cursor, len(actual))
                        if actual[k][:8] == head and loose(actual[k]).startswith(key)), None)
            if hit is not None:
                break
        if hit is None:
            return None
        picked.append(hit)
        cursor = hit + 1
    result = [ELLIPSIS] if picked and picked[0] > 0 else []
    for n, k in enumerate(picked):
        if n > 0 and k != picked[n - 1] + 1:
            result.append(ELLIPSIS)
        result.append(actual[k])
    if picked and picked[-1] < len(actual) - 1:
        result.append(ELLIPSIS)
    return result


def diff_report(block, expected, actual, wall_run):
    lines = [f"{block.where}: shown output differs from `{block.commands[0]}`"]
    real = [masked(l, wall_run) for l in actual]
    for line in expected:
        if line.strip() != ELLIPSIS and not any(same_line(line, a, wall_run) for a in actual):
            lines.append(f"  shown, not in the output: {masked(line, wall_run)}")
    lines.append("  real output (masked):")
    lines.extend("    | " + l for l in real)
    return "\n".join(lines)


def check_block(block, work, update):
    """Runs the block; returns (ok, new_expected_or_None, message)."""
    for command in block.commands:
        status, actual = run_command(command, work)
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
        blocks, lines = parse_page(page)
        replacements = []
        for block in blocks:
            if block.options["skip"] is not None:
                continue
            if not args.all and block.options["slow"] != args.slow:
                continue
            work = scratch_dir(args.source, args.build)
            started = time.monotonic()
            try:
                ok, new, message = check_block(block, work, args.update)
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
        for block, new in sorted(replacements, key=lambda r: -r[0].line):
            first = block.line  # the `$ cmd` line (0-based index block.line - 1)
            lines[first : first + len(block.expected)] = new
        if replacements:
            with open(page, "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
