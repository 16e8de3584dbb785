#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""README and --help agree: every long option the README's command lines
show for a tool and subcommand (batchd; batchd-pack, batchctl and
batchd-bench with each of theirs) is in that command's --help.

The README's synopses are what users copy, and --help is what the tool
really takes: a flag renamed in one and not the other sends a user to an
"unrecognized option". For a subcommand the option must be in its own
usage lines of --help (or anywhere in --help when those say [options]),
and every option those usage lines show must be in the README's synopsis
too. Each subcommand's own --help and -h are run as well: each must exit
0, print the usage (with that subcommand's lines) on stdout and nothing
on stderr, never "unrecognized option" or an error about a PATH named
--help. The test first proves it can fail: a README with a made-up
option must be refused, naming the option.

usage: test-help.py README BATCHD BATCHD_PACK BATCHCTL BATCHD_BENCH
"""
import re
import subprocess
import sys

TOOLS = ("batchd", "batchd-pack", "batchctl", "batchd-bench")
OPTION = re.compile(r"--[a-z][a-z0-9-]*")


def readme_commands(text):
    """(tool, [subcommands], {options}, line number) for each command line in
    the README's shell blocks; a command goes on over indented lines."""
    out, block, cur = [], False, None
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            block = not block and line.strip() == "```sh"
            cur = None
            continue
        if not block:
            continue
        words = line.split()
        if words and words[0] in TOOLS:
            rest = [w for w in words[1:] if not w.startswith(("[", "-")) and "SOCKET]" not in w]
            subs = rest[0].split("|") if rest and words[0] != "batchd" else []
            cur = (words[0], subs, set(OPTION.findall(line)), n)
            out.append(cur)
        elif cur and line[:1].isspace():
            cur[2].update(OPTION.findall(line))
        else:
            cur = None
    return out


def run_help(binary, *args, flag="--help"):
    """(exit status, stdout, stderr) of `binary args... flag`."""
    p = subprocess.run([binary, *args, flag], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def usage_block(help_text, tool, sub):
    """The usage lines of `tool sub` in help_text ('' if none)."""
    lines, got, inside = help_text.split("\n\n")[0].splitlines(), [], False
    for line in lines:
        words = line.replace("usage:", "").replace("Usage:", "").split()
        starts = tool in words[:2]
        if starts:
            after = words[words.index(tool) + 1:]
            after = [w for w in after if not w.startswith("[") and "SOCKET]" not in w]
            inside = bool(after) and sub in after[0].split("|")
        if inside:
            got.append(line)
    return "\n".join(got)


def has(text, opt):
    return re.search(re.escape(opt) + r"(?![a-z0-9-])", text) is not None


def sub_help(binary, tool, sub, bad):
    """`tool sub --help` and `tool sub -h`: exit 0, the same usage on stdout
    naming sub, stderr empty; every departure goes to bad. @return --help's
    stdout."""
    texts = []
    for flag in ("--help", "-h"):
        rc, out, err = run_help(binary, sub, flag=flag)
        name = f"{tool} {sub} {flag}"
        if rc != 0:
            bad.append(f"{name} exits {rc}: {(err or out)[:200]!r}")
        if "unrecognized option" in out + err:
            bad.append(f"{name} says \"unrecognized option\": {(err or out)[:200]!r}")
        if err:
            bad.append(f"{name} writes to stderr: {err[:200]!r}")
        if not usage_block(out, tool, sub):
            bad.append(f"{name} does not print {tool} {sub}'s usage on stdout")
        texts.append(out)
    if texts[0] != texts[1]:
        bad.append(f"{tool} {sub} --help and -h print different text")
    return texts[0]


def tool_helps(readme_text, binaries, bad):
    """Each tool's --help, and each subcommand's own."""
    helps = {}
    for tool, subs, _, _ in readme_commands(readme_text):
        if tool not in helps:
            rc, helps[tool], _ = run_help(binaries[tool])
            if rc != 0:
                bad.append(f"{tool} --help exits {rc}")
        for sub in subs:
            if (tool, sub) not in helps:
                helps[tool, sub] = sub_help(binaries[tool], tool, sub, bad)
    return helps


def disagreements(readme_text, binaries):
    """Every README option missing from its command's --help, and every
    option a subcommand's usage lines show that its README synopsis lacks,
    as sentences."""
    bad = []
    helps = tool_helps(readme_text, binaries, bad)
    readme = {}
    for tool, subs, options, n in readme_commands(readme_text):
        for sub in subs or [None]:
            readme.setdefault((tool, sub), [set(), n])[0].update(options)
    for (tool, sub), (options, n) in readme.items():
        where = helps[tool]
        name = f"{tool} {sub}" if sub else tool
        if sub:
            where = usage_block(helps[tool, sub], tool, sub)
            if not where:
                bad.append(f"README line {n}: {name} is not in {tool} --help")
                continue
            if "[options]" not in where:
                for opt in sorted(set(OPTION.findall(where)) - options):
                    bad.append(f"README line {n}: {name} lacks {opt}, which its --help shows")
            else:
                where = helps[tool, sub]
        for opt in sorted(options):
            if not has(where, opt):
                bad.append(f"README line {n}: {name} {opt} is not in its --help")
    return bad


def caught(readme, binaries, what, edit, want):
    """Does the check refuse the README with edit (old, new) made, saying want
    and nothing else? Prints ok or FAIL. @return 0 or 1 (failed)."""
    forged = readme.replace(*edit, 1)
    found = [d for d in disagreements(forged, binaries) if d not in disagreements(readme, binaries)]
    if forged == readme or len(found) != 1 or want not in found[0]:
        print(f"FAIL - {what} is not caught: {found}")
        return 1
    print(f"ok - {what} is caught: {found[0]}")
    return 0


def main(argv):
    readme_path = argv[1]
    binaries = dict(zip(TOOLS, argv[2:6]))
    readme = open(readme_path, encoding="utf-8").read()
    failed = 0

    # The checker must catch a made-up option, and an option --help shows
    # that the README's synopsis lost, or it proves nothing.
    failed += caught(readme, binaries, "a made-up README option",
                     ("batchd-bench h2d [", "batchd-bench h2d [--made-up-flag] ["),
                     "batchd-bench h2d --made-up-flag is not in its --help")
    failed += caught(readme, binaries, "an option missing from the README",
                     ("batchd-bench h2d [--size SIZE] [--reps N]", "batchd-bench h2d [--size SIZE]"),
                     "batchd-bench h2d lacks --reps")
    found = readme_commands(readme)
    counts = {t: sum(1 for c in found if c[0] == t) for t in TOOLS}
    if min(counts.values()) == 0:
        print(f"FAIL - README command lines found per tool: {counts}")
        failed += 1
    for d in disagreements(readme, binaries):
        print(f"FAIL - {d}")
        failed += 1
    total = sum(len(c[2]) for c in found)
    print(f"{'ok' if not failed else 'FAIL'} - {total} README options of {len(found)} command "
          f"lines checked against --help")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
