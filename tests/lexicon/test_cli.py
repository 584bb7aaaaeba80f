"""`synth lexicon` as a user runs it (embedded: one local owner, SQLite): entries added, imported,
shown and exported, and bad input refused with exit 2 and the reason, nothing half-applied."""

from __future__ import annotations

from tests.cli_helpers import synth, synth_env


def test_the_lexicon_commands_keep_versions_and_refuse_bad_input_with_exit_2(tmp_path):
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"))
    (tmp_path / "names.txt").write_text("# our names\nICU = intensive care unit\nNguyen = /ŋwɪn/\n")
    (tmp_path / "bad.pls").write_text("<lexicon><lexeme>")
    (tmp_path / "other.xml").write_text("<speak>hi</speak>")

    assert synth("lexicon", "add", "SQL", "sequel", env=env).returncode == 0
    done = synth("lexicon", "import", str(tmp_path / "names.txt"), env=env)
    assert done.returncode == 0 and "version 2, 3 entries" in done.stderr.decode()
    for args, reason in [
        (("import", str(tmp_path / "bad.pls")), "not a PLS file: not well-formed XML at line 1"),
        (("import", str(tmp_path / "other.xml")), "not a PLS file: the root element is <speak>"),
        (("add", "*", "anything", "--pattern"), "would match (nearly) every word"),
        (("add", "Nguyen", "ŋw<ɪn", "--phoneme"), "the piper voice cannot say '<'"),
        (("add", "x" * 10_000, "y"), "the written form has 10,000 characters; the limit is 200"),
        (("show", "nope"), "lexicon 'nope' not found"),
        (("add", "SQL", "sequel", "--lexicon", "名前"), "use 1 to 100 ASCII letters"),
        (("apply", "default", "--batch", "nope"), "no batch"),
        (("export", "-o", str(tmp_path / "no" / "such" / "dir.pls")), "dir.pls: No such file or directory"),
    ]:
        r = synth("lexicon", *args, env=env)
        assert r.returncode == 2 and reason in r.stderr.decode(), (args, r.stderr.decode())

    shown = synth("lexicon", "show", env=env).stdout.decode()
    assert shown == "SQL = sequel\nICU = intensive care unit\nNguyen = /ŋwɪn/\n"
    pls = synth("lexicon", "export", "--version", "1", env=env).stdout.decode()
    assert "<grapheme>SQL</grapheme><alias>sequel</alias>" in pls and "ICU" not in pls
    r = synth("submit", "-", "--lexicon", "nope", "--no-wait", env=env, input=b"Hello.")
    assert r.returncode == 2 and "lexicon 'nope' not found" in r.stderr.decode()
