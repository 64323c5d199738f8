"""The help texts and the docs name only options that exist: every
``--option`` of ``twistd disque --help`` and ``--help-strategies``, and of
every ``twistd ... disque ...`` and ``twistd ... disque-worker ...``
command line in README.md and docs/*.md (code blocks and inline code), is
one the option parser accepts (twistd's own before the subcommand,
the subcommand's after it)."""

import io
import pathlib
import re
import shlex

import pytest
from twisted.scripts.twistd import ServerOptions

from disque.node.tap import Options as NodeOptions
from disque.worker.tap import Options as WorkerOptions

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
PARSERS = {"twistd": ServerOptions, "disque": NodeOptions, "disque-worker": WorkerOptions}

OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def accepted(parser) -> tuple:
    """(long option names, short option letters) ``parser`` accepts."""
    options = parser()
    return {name.rstrip("=").replace("_", "-") for name in options.longOpt}, set(options.shortOpt.replace(":", ""))


def unknown(parser, words) -> list:
    """The option words (``--name``, ``--name=value``, ``-n``, ``-ny``) of
    ``words`` that ``parser`` does not accept."""
    long_names, letters = accepted(parser)
    bad = []
    for word in words:
        if word.startswith("--"):
            if word[2:].split("=", 1)[0].replace("_", "-") not in long_names:
                bad.append(word)
        elif word.startswith("-") and len(word) > 1 and not set(word[1:]) <= letters:
            bad.append(word)
    return bad


def help_texts():
    """(name, text) of ``twistd disque --help`` and ``--help-strategies``."""
    usage = NodeOptions().getUsage()
    usage = re.sub(r"-\n\s+", "-", usage)  # a word wrapped at its hyphen (--help-\n strategies)
    options = NodeOptions()
    options.helpOutput = out = io.StringIO()
    with pytest.raises(SystemExit):
        options.parseOptions(["--help-strategies"])
    return [("--help", usage), ("--help-strategies", out.getvalue())]


def test_the_help_texts_name_only_options_that_exist():
    for name, text in help_texts():
        words = [w for w in OPTION.findall(text) if w.startswith("--")]
        assert "--persistence" in words, name                     # (the parse sees them)
        assert unknown(NodeOptions, words) == [], name


def command_lines(text):
    """The shell commands of a Markdown text: its fenced blocks' lines
    (continued by a ``\\`` or by indented lines, as a usage synopsis is)
    and its inline code spans."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    for block in blocks:
        yield from re.sub(r"\\?\n(?=[ \t])", " ", block).splitlines()
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    yield from re.findall(r"`([^`\n]+)`", prose)


def twistd_commands(line):
    """(subcommand, twistd's words, the subcommand's words) of each twistd
    command of a shell line that runs ``disque`` or ``disque-worker``."""
    for segment in re.split(r"&&|\|\||[;&|]", line):
        try:
            words = shlex.split(segment, comments=True)
        except ValueError:
            continue
        starts = [i for i, w in enumerate(words) if w.endswith("twistd")]
        if not starts:
            continue
        words = words[starts[0] + 1:]
        sub = next((i for i, w in enumerate(words) if w in ("disque", "disque-worker")), None)
        if sub is not None:  # ("[--nodes" in a synopsis is an option too)
            yield words[sub], words[:sub], [w.strip("[]") for w in words[sub + 1:] if not w.startswith(">")]


def documented_commands():
    found = []
    for path in DOCS:
        for line in command_lines(path.read_text()):
            for sub, before, after in twistd_commands(line):
                found.append(("%s: %s" % (path.name, line.strip()), sub, before, after))
    return found


def test_the_docs_run_twistd_with_options_that_exist():
    found = documented_commands()
    assert len(found) > 10 and {sub for _, sub, _, _ in found} == {"disque", "disque-worker"}
    bad = []
    for where, sub, before, after in found:
        bad += ["%s: twistd %s" % (where, w) for w in unknown(PARSERS["twistd"], before)]
        bad += ["%s: %s %s" % (where, sub, w) for w in unknown(PARSERS[sub], after)]
    assert bad == []


def test_the_check_sees_an_option_that_does_not_exist():
    """(What the two tests above rest on.)"""
    [(sub, before, after)] = twistd_commands("twistd -n --pidfile= disque --port 7711 --http-portt 80 &")
    assert (sub, before) == ("disque", ["-n", "--pidfile="])
    assert unknown(NodeOptions, after) == ["--http-portt"]
    assert unknown(ServerOptions, ["-nq", "-ny"]) == ["-nq"]
    assert list(twistd_commands("for i in 1 2; do twistd -l x.log disque --config c$i.conf; done")) == [
        ("disque", ["-l", "x.log"], ["--config", "c$i.conf"])]
    synopsis = "```\ntwistd -n disque-worker --handler m:f --queues q\n       [--nodes h:p] [--threads]\n```\n"
    [line] = command_lines(synopsis)
    [(sub, _, after)] = twistd_commands(line)
    assert sub == "disque-worker" and unknown(WorkerOptions, after) == []
    assert unknown(WorkerOptions, ["--nodes", "h:p", "--thread"]) == ["--thread"]


def test_a_strategy_without_an_option_of_its_own_is_given_with_set():
    from disque.plugins import help_text

    text = help_text({"persistence"})
    assert "persistence (--persistence, or 'persistence' in the config file):" in text
    assert "federation-policy (--set federation-policy=..., or 'federation-policy' in the config file):" in text
