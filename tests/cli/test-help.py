#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The docs and --help agree: every long option the command lines of the
docs' ```sh blocks (README.md and docs/*.md, read as one text in the
order given; "README" below is that text) show for a tool and subcommand
(batchd; batchd-pack, batchctl and batchd-bench with each of theirs) is
in that command's --help. The README's own quick starts are examples,
not synopses, in ```bash blocks, which this does not read.

The synopses are what users copy, and --help is what the tool
really takes: a flag renamed in one and not the other sends a user to an
"unrecognized option". For a subcommand the option must be in its own
usage lines of --help (or anywhere in --help when those say [options]),
and every option those usage lines show must be in the README's synopsis
too. Each subcommand's own --help and -h are run as well: each must exit
0, print the usage (with that subcommand's lines) on stdout and nothing
on stderr, never "unrecognized option" or an error about a PATH named
--help. The test first proves it can fail: a README with a made-up
option must be refused, naming the option.

With --man it checks the man pages (docs/man/*.scd) instead, which are
the reference: every option a tool's --help shows is documented (a
definition term of its page), every option the page names is in that
--help, and each subcommand the usage lines show has its own section
naming the options of its usage lines. --help, -h and --version count
as shown when the tool answers them (exit 0). batchd.conf(5) documents
exactly the keys the daemon's configuration parser accepts, read from
its key table in daemon/config/config*.c (cross-checked against its enum, so a
table the pattern misreads fails). Each built page must render without
warnings (man --warnings, else groff -ww; skipped with a message when
neither is installed or scdoc did not build them). This too first proves
it can fail: pages forged with an option or key missing, one made up, or
a subcommand's section gone must each be refused, naming it.

usage: test-help.py DOC[,DOC...] BATCHD BATCHD_PACK BATCHCTL BATCHD_BENCH
       test-help.py --man MAN_SRC_DIR CONFIG_SRC_DIR BATCHD BATCHD_PACK BATCHCTL
                    BATCHD_BENCH [BUILT_PAGE...]
"""
import os
import re
import shutil
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
                bad.append(f"doc line {n}: {name} is not in {tool} --help")
                continue
            if "[options]" not in where:
                for opt in sorted(set(OPTION.findall(where)) - options):
                    bad.append(f"doc line {n}: {name} lacks {opt}, which its --help shows")
            else:
                where = helps[tool, sub]
        for opt in sorted(options):
            if not has(where, opt):
                bad.append(f"doc line {n}: {name} {opt} is not in its --help")
    return bad


def caught(readme, binaries, what, edit, want, where):
    """Does the check refuse the README with edit (old, new) made, saying want
    and nothing else? Prints ok or FAIL. @return 0 or 1 (failed)."""
    forged = readme.replace(*edit, 1)
    found = [d for d in disagreements(forged, binaries) if d not in disagreements(readme, binaries)]
    if forged == readme or len(found) != 1 or want not in found[0]:
        print(f"FAIL - {what} is not caught: {found}")
        return 1
    print(f"ok - {what} is caught: {where(found[0])}")
    return 0


def main(argv):
    if argv[1] == "--man":
        return man_main(argv[2:])
    paths = argv[1].split(",")
    binaries = dict(zip(TOOLS, argv[2:6]))
    texts = [open(p, encoding="utf-8").read().rstrip("\n") for p in paths]
    readme = "\n".join(texts)
    # "doc line N" of the joined docs, as FILE:LINE, for the messages.
    starts = [0]
    for t in texts:
        starts.append(starts[-1] + t.count("\n") + 1)

    def where(msg):
        def loc(m):
            n = int(m.group(1))
            k = max(i for i in range(len(paths)) if starts[i] < n)
            return f"{os.path.relpath(paths[k])}:{n - starts[k]}"
        return re.sub(r"doc line (\d+)", loc, msg)
    failed = 0

    # The checker must catch a made-up option, and an option --help shows
    # that the README's synopsis lost, or it proves nothing.
    failed += caught(readme, binaries, "a made-up option in a synopsis",
                     ("batchd-bench h2d [", "batchd-bench h2d [--made-up-flag] ["),
                     "batchd-bench h2d --made-up-flag is not in its --help", where)
    failed += caught(readme, binaries, "an option missing from a synopsis",
                     ("batchd-bench h2d [--size SIZE] [--reps N]", "batchd-bench h2d [--size SIZE]"),
                     "batchd-bench h2d lacks --reps", where)
    found = readme_commands(readme)
    counts = {t: sum(1 for c in found if c[0] == t) for t in TOOLS}
    if min(counts.values()) == 0:
        print(f"FAIL - documented command lines found per tool: {counts}")
        failed += 1
    for d in disagreements(readme, binaries):
        print(f"FAIL - {where(d)}")
        failed += 1
    total = sum(len(c[2]) for c in found)
    print(f"{'ok' if not failed else 'FAIL'} - {total} documented options of {len(found)} "
          f"command lines checked against --help")
    return 1 if failed else 0


# ---- man pages ---------------------------------------------------------------

PAGES = {"batchd": "batchd.8", "batchd-pack": "batchd-pack.1", "batchctl": "batchctl.1",
         "batchd-bench": "batchd-bench.1"}
CONF_PAGE = "batchd.conf.5"
ANY_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")
# Answered by every tool, though not every usage text lists them.
ALWAYS = ("--help", "-h", "--version")


def plain(line):
    """An scdoc line without its bold and underline marks."""
    return line.replace("*", "").replace("_", " ").replace("\\", "")


def page_terms(text):
    """{option: line number} of the options each definition term (a line
    starting with *-) documents."""
    terms = {}
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("*-"):
            for opt in ANY_OPTION.findall(plain(line)):
                terms.setdefault(opt, n)
    return terms


def page_sections(text):
    """{subcommand: text of its section}: a '## a, b' heading opens a section
    for each name in it."""
    out, names = {}, []
    for line in text.splitlines():
        if line.startswith("#"):
            names = re.findall(r"[a-z][a-z0-9-]*", line[3:]) if line.startswith("## ") else []
            for name in names:
                out[name] = ""
        else:
            for name in names:
                out[name] += line + "\n"
    return out


def help_commands(help_text, tool):
    """The subcommands the usage lines of help_text show, in order."""
    subs = []
    for line in help_text.split("\n\n")[0].splitlines():
        words = line.replace("usage:", "").replace("Usage:", "").split()
        if tool not in words[:2]:
            continue
        after = [w for w in words[words.index(tool) + 1:]
                 if not w.startswith("[") and "SOCKET]" not in w]
        for sub in after[0].split("|") if after else []:
            if re.fullmatch(r"[a-z][a-z0-9-]*", sub) and sub not in subs:
                subs.append(sub)
    return subs


def tool_facts(binary, tool):
    """What the tool takes: its --help text, the options it shows (plus the
    ALWAYS ones it answers), and its subcommands."""
    rc, text, _ = run_help(binary)
    options = set(ANY_OPTION.findall(text)) if rc == 0 else set()
    for flag in ALWAYS:
        p = subprocess.run([binary, flag], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=30)
        if p.returncode == 0 and p.stdout:
            options.add(flag)
    return {"help": text, "rc": rc, "options": options, "subs": help_commands(text, tool)}


def config_keys(config_dir):
    """{(section, key)} of the parser's key table in config_dir/config*.c,
    and sentences for anything that makes the reading doubtful."""
    bad, keys = [], set()
    for name in sorted(os.listdir(config_dir)):
        if not re.fullmatch(r"config.*\.c", name):
            continue
        src = open(os.path.join(config_dir, name), encoding="utf-8").read()
        table = re.search(r"\bkeys\[\]\s*=\s*\{(.*?)\n\};", src, re.S)
        enum = re.search(r"enum key_id\s*\{(.*?)\};", src, re.S)
        if not table:
            continue
        rows = re.findall(r'\{\s*"([a-z0-9_]+)",\s*"([a-z0-9_]+)",\s*(KEY_[A-Z0-9_]+)',
                          table.group(1))
        ids = re.findall(r"\bKEY_[A-Z0-9_]+", enum.group(1)) if enum else []
        entries = table.group(1).count("{")
        if len(rows) != entries or sorted(r[2] for r in rows) != sorted(ids):
            bad.append(f"{name}: read {len(rows)} keys of {entries} table rows and {len(ids)} "
                       f"enum key_id members: the key table's layout changed")
        keys |= {(r[0], r[1]) for r in rows}
    if len(keys) < 10:
        bad.append(f"{config_dir}: found {len(keys)} configuration keys (no keys[] table?)")
    return keys, bad


def conf_page_keys(text):
    """{(section, key): line} of batchd.conf(5): '## [section]' headings,
    definition terms '*key* = ...'."""
    out, section = {}, None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"## \[([a-z0-9_]+)\]", line)
        if m or line.startswith("#"):
            section = m.group(1) if m else None
            continue
        m = re.match(r"\*([a-z0-9_]+)\* =", line)
        if m and section:
            out.setdefault((section, m.group(1)), n)
    return out


def tool_page_problems(tool, page, text, facts):
    bad, shown = [], facts["options"]
    terms = page_terms(text)
    for opt in sorted(shown - set(terms)):
        bad.append(f"{page}: {opt} ({tool} --help) is not documented (no definition term)")
    for opt, n in sorted(terms.items()):
        if opt not in shown:
            bad.append(f"{page}:{n}: {opt} is not in {tool} --help")
    for opt in sorted({o for o in OPTION.findall(plain(text))} - shown):
        if opt not in terms:
            bad.append(f"{page}: names {opt}, which is not in {tool} --help")
    sections = page_sections(text)
    for sub in facts["subs"]:
        if sub not in sections:
            bad.append(f"{page}: {tool} {sub} has no section (## {sub})")
            continue
        usage = usage_block(facts["help"], tool, sub)
        for opt in sorted(set(OPTION.findall(usage))):
            if not has(plain(sections[sub]), opt):
                bad.append(f"{page}: section {sub} lacks {opt}, which {tool} {sub}'s usage shows")
    for sub in sorted(set(sections) - set(facts["subs"])):
        bad.append(f"{page}: section {sub} is not a subcommand of {tool} --help")
    return bad


def man_disagreements(pages, facts, keys):
    """Every way the page texts depart from the tools and the parser."""
    bad = []
    for tool, page in PAGES.items():
        bad += tool_page_problems(tool, page, pages[page], facts[tool])
    documented = conf_page_keys(pages[CONF_PAGE])
    for sec, key in sorted(keys - set(documented)):
        bad.append(f"{CONF_PAGE}: [{sec}] {key} is not documented "
                   f"(no '*{key}* =' under ## [{sec}])")
    for (sec, key), n in sorted(documented.items()):
        if (sec, key) not in keys:
            bad.append(f"{CONF_PAGE}:{n}: [{sec}] {key} is not a key the parser accepts")
    for opt in sorted(set(OPTION.findall(plain(pages[CONF_PAGE]))) - facts["batchd"]["options"]):
        bad.append(f"{CONF_PAGE}: names {opt}, which is not in batchd --help")
    return bad


def man_caught(pages, facts, keys, what, page, edit, want):
    """Is pages with edit (old, new) made to page refused, a new complaint
    saying want? Prints ok or FAIL. @return 0 or 1 (failed)."""
    forged = dict(pages)
    forged[page] = pages[page].replace(*edit, 1)
    before = man_disagreements(pages, facts, keys)
    found = [d for d in man_disagreements(forged, facts, keys) if d not in before]
    if forged[page] == pages[page] or not any(want in d for d in found):
        print(f"FAIL - {what} is not caught: {found}")
        return 1
    print(f"ok - {what} is caught: {'; '.join(found)}")
    return 0


def render_problems(built):
    """Warnings of each built page rendered at 80 columns, or why unchecked."""
    if not built:
        return [], "the pages were not built (no scdoc: -Dman=disabled or scdoc missing)"
    if shutil.which("man"):
        cmd, env = ["man", "--warnings", "-E", "UTF-8", "-l"], dict(os.environ, MANWIDTH="80")
    elif shutil.which("groff"):
        cmd, env = ["groff", "-man", "-ww", "-z"], None
    else:
        return [], "neither man (man-db) nor groff is installed"
    bad = []
    for page in built:
        p = subprocess.run(cmd + [page], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=60)
        if p.returncode != 0 or p.stderr.strip():
            bad.append(f"{os.path.basename(page)}: {cmd[0]} says (exit {p.returncode}): "
                       f"{p.stderr.strip()[:300]!r}")
        elif cmd[0] == "man" and len(p.stdout.splitlines()) < 10:
            bad.append(f"{os.path.basename(page)}: renders as {len(p.stdout.splitlines())} lines")
    return bad, None


def man_main(args):
    src_dir, config_dir = args[0], args[1]
    binaries = dict(zip(TOOLS, args[2:6]))
    built = args[6:]
    failed = 0
    pages = {p: open(os.path.join(src_dir, p + ".scd"), encoding="utf-8").read()
             for p in list(PAGES.values()) + [CONF_PAGE]}
    facts = {t: tool_facts(binaries[t], t) for t in TOOLS}
    for t, f in facts.items():
        if f["rc"] != 0 or not f["options"]:
            print(f"FAIL - {t} --help exits {f['rc']} showing {len(f['options'])} options")
            failed += 1
    keys, bad_keys = config_keys(config_dir)
    for d in bad_keys:
        print(f"FAIL - {d}")
        failed += 1

    # Each kind of departure must be caught, or the check proves nothing.
    failed += man_caught(pages, facts, keys, "an option missing from a page", "batchd-bench.1",
                         ("*--reps* _N_\n", ""), "--reps (batchd-bench --help) is not documented")
    failed += man_caught(pages, facts, keys, "a made-up option in a page", "batchctl.1",
                         ("*--keys*\n", "*--keys*\n\tx\n\n*--made-up-flag*\n"),
                         "--made-up-flag is not in batchctl --help")
    failed += man_caught(pages, facts, keys, "a subcommand without its section", "batchd-pack.1",
                         ("## verify\n", ""), "batchd-pack verify has no section")
    failed += man_caught(pages, facts, keys, "a key missing from batchd.conf(5)", CONF_PAGE,
                         ("*queue_depth* =", "queue_depth ="),
                         "[io] queue_depth is not documented")
    failed += man_caught(pages, facts, keys, "a made-up key in batchd.conf(5)", CONF_PAGE,
                         ("## [io]\n", "## [io]\n\n*made_up* = _N_\n\tx\n"),
                         "[io] made_up is not a key the parser accepts")

    for d in man_disagreements(pages, facts, keys):
        print(f"FAIL - {d}")
        failed += 1
    bad, skipped = render_problems(built)
    for d in bad:
        print(f"FAIL - {d}")
        failed += 1
    if skipped:
        print(f"ok - # SKIP rendering not checked: {skipped}")
    else:
        print(f"{'ok' if not bad else 'FAIL'} - {len(built)} built pages render without warnings")
    total = sum(len(f["options"]) for f in facts.values())
    print(f"{'ok' if not failed else 'FAIL'} - {total} options of {len(TOOLS)} tools and "
          f"{len(keys)} configuration keys checked against {len(pages)} man pages")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
