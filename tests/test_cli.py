"""`synth` as a user runs it: the embedded default end to end, and every kind of bad input."""

import json
import signal
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from tests.cli_helpers import REPO, start_synth, synth, synth_env
from tests.speech import transcribe, word_error_rate
from tests.waiting import eventually


@pytest.fixture
def embedded_env(tmp_path):
    return synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"))


def batches_in(data_dir: Path) -> int:
    db = data_dir / "synth.db"
    if not db.exists():
        return 0
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        if "batches" not in inspect(conn).get_table_names():
            return 0
        return conn.execute(text("SELECT count(*) FROM batches")).scalar()


@pytest.mark.slow
def test_embedded_submit_renders_the_sample_corpus(tmp_path, embedded_env):
    out = tmp_path / "out"
    result = synth(
        "submit",
        str(REPO / "examples/corpus.txt"),
        "--format",
        "mp3",
        "--name",
        "sample",
        "-o",
        str(out),
        env=embedded_env,
    )
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert "10 jobs, 10 done, 0 failed, 1 empty line skipped" in stderr
    assert "x real time" in stderr and "TTFB p50" in stderr
    files = sorted(p.name for p in out.glob("*.mp3"))
    assert len(files) == 10 and files[0] == "line-000001.mp3"
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert {m["status"] for m in manifest} == {"done"} and all(m["duration_s"] > 1 for m in manifest)
    spoken = transcribe((out / "line-000004.mp3").read_bytes())
    assert word_error_rate("The quick brown fox jumps over the lazy dog.", spoken) <= 0.35, spoken

    status = synth("status", "sample", "--json", env=embedded_env)
    assert status.returncode == 0
    summary = json.loads(status.stdout)
    assert summary["finished"] and summary["counts"]["done"] == 10 and summary["audio_s"] > 30
    fetched = synth("fetch", summary["batch_id"][:8], "-o", str(tmp_path / "again"), env=embedded_env)
    assert fetched.returncode == 0 and len(list((tmp_path / "again").glob("*.mp3"))) == 10


BAD_FILES = {
    "empty": (b"", "the corpus is empty"),
    "binary": (bytes(range(256)) * 4, "binary file"),
    "latin1": ("caf\u00e9 cr\u00e8me\n".encode("latin-1"), "not UTF-8 text"),
    "huge_line": (b"ok\n" + b"word " * 210_000 + b"\n", "line 2 has 1,050,000 characters"),
    # Past the first 64 KiB, where a prefix check stops looking.
    "late_nul": (b"A line of text.\n" * 5000 + b"bad\x00line\n", "a NUL byte on line 5001"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_corpus_is_refused_and_nothing_is_written(tmp_path, embedded_env, case):
    data, message = BAD_FILES[case]
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(data)
    result = synth("submit", str(corpus), env=embedded_env, timeout=60)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 2
    assert stderr.startswith("error: ") and message in stderr and len(stderr.splitlines()) == 1
    assert batches_in(tmp_path / "data") == 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["--voice", "nobody"], "unknown voice 'nobody' for engine 'piper'; choose one of joe"),
        (["--format", "aiff"], "Invalid value for '--format'"),
        (["--sample-rate", "12345"], "unsupported sample rate 12345"),
        (["-o", "/dev/null/out"], "cannot write to /dev/null/out: Not a directory"),
    ],
)
def test_bad_options_are_refused(tmp_path, embedded_env, args, message):
    result = synth("submit", str(REPO / "examples/corpus.txt"), *args, env=embedded_env, timeout=60)
    assert result.returncode == 2 and message in result.stderr.decode()
    assert batches_in(tmp_path / "data") == 0


def test_unreachable_redis_is_a_clear_error(tmp_path, embedded_env):
    env = {**embedded_env, "SYNTH_REDIS_URL": "redis://127.0.0.1:1/0"}
    result = synth("submit", str(REPO / "examples/corpus.txt"), env=env, timeout=60)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 3 and stderr.startswith("error: Redis at redis://127.0.0.1:1/0 is unreachable")
    assert batches_in(tmp_path / "data") == 0


def test_the_api_with_redis_unreachable_says_so_in_one_line(embedded_env):
    env = {**embedded_env, "SYNTH_REDIS_URL": "redis://127.0.0.1:1/0"}
    result = synth("api", "--port", "1", env=env, timeout=60)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 3 and stderr.startswith("error: Redis at redis://127.0.0.1:1/0 is unreachable")
    assert len(stderr.splitlines()) == 1, stderr


def test_unreachable_database_is_a_clear_error(embedded_env):
    env = {**embedded_env, "SYNTH_DATABASE_URL": "postgresql+psycopg://synth@127.0.0.1:1/synth"}
    result = synth("submit", str(REPO / "examples/corpus.txt"), env=env, timeout=60)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 3
    assert stderr.startswith("error: database postgresql+psycopg://synth@127.0.0.1:1/synth is unreachable")
    assert len(stderr.splitlines()) == 1


@pytest.mark.parametrize("case", ["missing bucket", "nothing listens"])
def test_unreachable_s3_storage_is_a_clear_error_and_nothing_is_written(tmp_path, embedded_env, s3_endpoint, case):
    endpoint = s3_endpoint if case == "missing bucket" else "http://127.0.0.1:1"
    env = {
        **embedded_env,
        "SYNTH_S3_BUCKET": "no-such-bucket",
        "SYNTH_S3_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    result = synth("submit", str(REPO / "examples/corpus.txt"), env=env, timeout=60)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 3, stderr
    assert stderr.startswith("error: S3 bucket 'no-such-bucket'") and len(stderr.splitlines()) == 1
    assert batches_in(tmp_path / "data") == 0


def test_an_unwritable_object_folder_is_a_clear_error_and_nothing_is_written(tmp_path, embedded_env):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "objects").write_text("a file where the object folder goes")
    result = synth("submit", str(REPO / "examples/corpus.txt"), env=embedded_env, timeout=60)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 3, stderr
    assert stderr.startswith("error: object folder ") and len(stderr.splitlines()) == 1
    assert batches_in(tmp_path / "data") == 0


@pytest.mark.parametrize(
    "setting,value,message",
    [
        ("SYNTH_DATABASE_URL", "not-a-url", "bad setting database_url: "),
        ("SYNTH_DATABASE_URL", "postgres://synth@127.0.0.1:1/synth", "postgresql+psycopg://"),
        ("SYNTH_DATABASE_URL", "mysql://synth@127.0.0.1:1/synth", "bad setting database_url: "),
        ("SYNTH_ENGINE", "pipr", "bad setting engine: Input should be 'piper' or 'orpheus'"),
        (
            "SYNTH_DEVICE",
            "gpu",
            "bad setting device: Value error, unknown device 'gpu'; choose auto, cuda (or cuda:N) or cpu",
        ),
        ("SYNTH_DTYPE", "fp16", "bad setting dtype: Input should be 'auto', 'float32', 'bfloat16' or 'float16'"),
        ("SYNTH_QUANTIZATION", "fp4", "bad setting quantization: Input should be 'none', 'fp8', 'int8' or 'nf4'"),
    ],
)
def test_a_setting_synth_cannot_use_is_refused_in_one_line(tmp_path, embedded_env, setting, value, message):
    result = synth("submit", str(REPO / "examples/corpus.txt"), env={**embedded_env, setting: value}, timeout=60)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 2 and stderr.startswith("error: ") and message in stderr, stderr
    assert len(stderr.splitlines()) == 1
    assert batches_in(tmp_path / "data") == 0


def test_a_negative_worker_concurrency_is_refused_before_the_engine_loads(embedded_env):
    result = synth("worker", "-c", "-1", env=embedded_env, timeout=60)
    assert result.returncode == 2 and "-1 is not in the range x>=0" in result.stderr.decode()
    assert b"Traceback" not in result.stderr


def test_a_verify_worker_on_the_embedded_redis_is_refused_saying_why(embedded_env):
    result = synth("worker", "--verify", env=embedded_env, timeout=60)
    assert result.returncode == 2 and "serves the verify queue of a shared Redis" in result.stderr.decode()


def test_a_model_the_embedded_worker_cannot_load_is_a_setting_error_and_the_batch_is_withdrawn(tmp_path, embedded_env):
    """Kept queued, the batch would render beside the one submitted again once the setting is fixed."""
    env = {**embedded_env, "SYNTH_ENGINE": "orpheus", "SYNTH_MODEL": str(tmp_path / "no-such-model")}
    result = synth("submit", str(REPO / "examples/corpus.txt"), env=env, timeout=120)
    last = result.stderr.decode().strip().splitlines()[-1]
    assert result.returncode == 2, result.stderr.decode()
    assert last.startswith("error: the embedded worker cannot start its engine: cannot load the Orpheus model"), last
    assert "(SYNTH_MODEL)" in last and "was withdrawn, nothing was rendered: fix the setting and submit again" in last
    assert batches_in(tmp_path / "data") == 0


@pytest.mark.parametrize(
    "content,message",
    [
        (b"redis_url = \n", "is not valid TOML: Invalid value (at line 1, column 13)"),
        (
            b'redis_ur = "redis://127.0.0.1:1/0"\n',
            "names unknown setting 'redis_ur' (the settings: docs/configuration.md)",
        ),
        (None, "does not exist"),
    ],
)
def test_a_config_file_synth_cannot_use_is_refused_in_one_line(tmp_path, embedded_env, content, message):
    config = tmp_path / "synth.toml"
    if content is not None:
        config.write_bytes(content)
    ways = [([], {**embedded_env, "SYNTH_CONFIG": str(config)})]
    if content is not None:  # a missing --config FILE is click's own error
        ways.append((["--config", str(config)], embedded_env))
    for args, env in ways:
        result = synth(*args, "submit", str(REPO / "examples/corpus.txt"), env=env, timeout=60)
        stderr = result.stderr.decode().strip()
        assert result.returncode == 2 and stderr == f"error: config file {config} {message}", stderr
    assert batches_in(tmp_path / "data") == 0


def test_stdin_and_no_wait_with_an_external_broker(tmp_path, redis_url, database_url):
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "d"), SYNTH_REDIS_URL=redis_url, SYNTH_DATABASE_URL=database_url)
    result = synth("submit", "-", "--name", "piped", env=env, input=b"Hello.\n\nWorld.\n", timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    batch_id = result.stdout.decode().strip()
    assert len(batch_id) == 32 and "2 jobs queued, 1 empty line skipped" in result.stderr.decode()
    status = json.loads(synth("status", batch_id, "--json", env=env).stdout)
    assert status["counts"]["queued"] == 2 and not status["finished"]


def test_counts_in_what_submit_and_status_print_agree_with_their_number(tmp_path, redis_url, database_url):
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "d"), SYNTH_REDIS_URL=redis_url, SYNTH_DATABASE_URL=database_url)
    result = synth("submit", "-", "--no-wait", env=env, input=b"Hello.\n\n", timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    assert ": 1 job queued, 1 empty line skipped" in result.stderr.decode()
    shown = synth("status", result.stdout.decode().strip(), env=env).stderr.decode()
    assert ": 1 job, 0 done, 0 failed, 1 empty line skipped" in shown
    assert "1 job not finished: 1 queued" in shown


def test_a_name_several_batches_share_resolves_to_the_newest_and_says_so(tmp_path, redis_url, database_url):
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "d"), SYNTH_REDIS_URL=redis_url, SYNTH_DATABASE_URL=database_url)
    name = f"nightly-{tmp_path.name}"
    ids = [
        synth("submit", "-", "--name", name, env=env, input=b"Hello.\n", timeout=60).stdout.decode().strip()
        for _ in range(2)
    ]
    shown = synth("status", name, "--json", env=env)
    assert json.loads(shown.stdout)["batch_id"] == ids[1]
    told = f"2 batches are named {name}; showing the newest, {ids[1]}; use an id for another"
    assert told in shown.stderr.decode()
    fetched = synth("fetch", name, "-o", str(tmp_path / "out"), env=env)
    assert fetched.returncode == 0 and "2 batches are named" in fetched.stderr.decode()
    assert "batches are named" not in synth("status", ids[0], env=env).stderr.decode()


def test_ctrl_c_during_an_embedded_submit_says_the_jobs_stay_queued_and_how_to_finish_them(tmp_path, embedded_env):
    # Long enough that the batch is still rendering when the interrupt lands, however slow the host.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"This is line {n} of a batch that is stopped.\n" for n in range(200)))
    # A child inherits an ignored SIGINT, and earlier tests may leave this process ignoring it; a
    # user's shell starts synth with the default, as this does.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = start_synth("submit", str(corpus), "--name", "stopped", env=embedded_env, log=tmp_path / "submit.log")
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        eventually(lambda: "jobs queued" in (tmp_path / "submit.log").read_text(), 60, "the batch to be queued")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        if process.poll() is None:
            process.kill()
    log = (tmp_path / "submit.log").read_text()
    assert "interrupted: batch " in log and "stay queued; `synth worker` (same SYNTH_DATA_DIR) finishes them" in log
    status = json.loads(synth("status", "stopped", "--json", env=embedded_env).stdout)
    assert status["total"] == 200 and status["counts"]["queued"] > 0, status


def test_help_is_helpful(embedded_env):
    out = synth("--help", env=embedded_env).stdout.decode()
    for command in ("submit", "status", "fetch", "worker", "db"):
        assert command in out
    assert "--sample-rate" in synth("submit", "--help", env=embedded_env).stdout.decode()


def test_models_help_names_only_what_the_group_has(embedded_env):
    out = synth("models", "--help", env=embedded_env).stdout.decode()
    assert "make-tiny" in out and "inspect" not in out.lower()


def test_the_webhook_queue_under_its_former_name_consumes_both_with_a_warning(capsys):
    from cli.worker import _former_names

    assert _former_names(["realtime", "webhooks"]) == ["realtime", "webhooks"]
    assert capsys.readouterr().err == ""
    assert _former_names(["callbacks", "batch.le10s"]) == ["webhooks", "callbacks", "batch.le10s"]
    assert "deprecated" in capsys.readouterr().err
    assert "webhooks" in synth("worker", "--help", env=synth_env()).stdout.decode()


def every_command():
    """(name, click command) for `synth` and each command and subcommand under it."""
    import click

    from cli.main import cli

    ctx = click.Context(cli)
    found, todo = [], [("synth", cli)]
    while todo:
        name, command = todo.pop()
        found.append((name, command))
        if isinstance(command, click.Group):
            todo += [(f"{name} {sub}", command.get_command(ctx, sub)) for sub in command.list_commands(ctx)]
    return found


def test_every_option_of_every_command_says_what_it_does():
    import click

    bare = [
        f"{name} {'/'.join(p.opts)}"
        for name, command in every_command()
        for p in command.params
        if isinstance(p, click.Option) and not p.help
    ]
    assert not bare, f"options without a help text: {bare}"


def test_submit_help_names_the_settings_its_defaults_come_from(embedded_env):
    out = " ".join(synth("submit", "--help", env=embedded_env).stdout.decode().split())
    assert "SYNTH_DEFAULT_VOICE" in out and "SYNTH_DEFAULT_FORMAT" in out


def test_db_upgrade_to_a_revision_that_does_not_exist_says_which_exist(embedded_env):
    result = synth("db", "upgrade", "--revision", "nope", env=embedded_env, timeout=60)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 2 and stderr.startswith("error: cannot upgrade to revision 'nope': "), stderr
    assert "migrations/versions" in stderr and len(stderr.splitlines()) == 1
    assert synth("db", "upgrade", env=embedded_env, timeout=60).returncode == 0
