"""The command line: option tables, import cost, settings validation, the console."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tfx_accum import console
from tfx_accum.components.config.hyperparameters import Hyperparameters
from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.pipeline.cli.arguments import fixed_hyperparameters
from tfx_accum.pipeline.cli.parser import build_parser, main
from tfx_accum.pipeline.cli.temp_dir import command_temp_dir

ROOT = Path(__file__).resolve().parents[2]


def test_help_imports_neither_tensorflow_nor_tfx():
    """`tfx-accum --help` must answer fast: no TensorFlow, Keras or TFX import on the way."""
    code = (
        "import sys\n"
        "from tfx_accum.pipeline.cli.parser import build_parser\n"
        "build_parser().format_help()\n"
        "heavy = [m for m in ('tensorflow', 'keras', 'tfx', 'keras_tuner') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_old_flag_names_are_aliases():
    args = build_parser().parse_args(["run", "--steps-choices", "2,4"])
    assert args.accumulation_steps_choices == (2, 4)


def test_fixed_hyperparameters_only_with_no_tune():
    parser = build_parser()
    args = parser.parse_args(["run", "--no-tune", "--accumulation-steps", "8"])
    assert fixed_hyperparameters(args) == Hyperparameters(accumulation_steps=8)
    assert fixed_hyperparameters(parser.parse_args(["run", "--no-tune"])) == Hyperparameters()
    assert fixed_hyperparameters(parser.parse_args(["run"])) is None


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--micro-batch-size", "8"], "--micro-batch-size only apply with --no-tune"),
        (["--no-tune", "--learning-rate", "-1"], "learning_rate"),
        (["--no-tune", "--accumulation-steps", "0"], "accumulation_steps"),
        (["--train-steps", "0"], "--train-steps must be >= 1"),
    ],
)
def test_bad_settings_are_one_line_errors_with_exit_2(argv, message, tmp_path, capsys):
    assert main(["run", "--output-dir", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()  # nothing written


def test_settings_validation_names_the_setting():
    with pytest.raises(ValueError, match="model.*cnn"):
        ModelSettings(model="resnet")
    with pytest.raises(ValueError, match="num_classes"):
        ModelSettings(num_classes=1)
    with pytest.raises(ValueError, match="missing"):
        Hyperparameters.from_values({"accumulation_steps": 2})
    values = {"accumulation_steps": 2, "micro_batch_size": 8, "learning_rate": 0.1, "tuner/x": 1}
    assert Hyperparameters.from_values(values).effective_batch == 16


def test_console_capture_sends_library_output_to_the_log(tmp_path):
    """Our lines reach the console; writes to fd 1/2 by anything else go to the log only."""
    code = f"""
import os, sys, warnings
from tfx_accum import console
with console.capture({str(tmp_path / "run.log")!r}):
    console.say("[ours] hello")
    print("library print")
    os.write(2, b"C++ library stderr\\n")
    warnings.warn("a library warning")
    os.system("echo child process output")
print("after")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[ours] hello\nafter\n"
    assert proc.stderr == ""
    log = (tmp_path / "run.log").read_text()
    for text in ("[ours] hello", "library print", "C++ library stderr", "a library warning"):
        assert text in log
    assert "child process output" in log
    assert console.log_path() is None  # nothing active in this process


def test_a_failing_component_shows_its_cause_and_the_log(tmp_path, capfd, monkeypatch):
    """A library error inside the run: exit 1, the cause from the log on the console."""
    import os

    from tfx_accum.pipeline.local import runner as local_runner

    def failing_run_local(**kwargs):
        os.write(2, b"noise from a library\n")
        os.write(2, b"ValueError: not a square number of features (the real cause)\n")
        raise RuntimeError("Tuner failed")

    monkeypatch.setattr(local_runner, "run_local", failing_run_local)
    data = tmp_path / "data"
    data.mkdir()
    # Rows enough to train, validate and evaluate (tfx_accum.components.config.tasks: MIN_EXAMPLES).
    (data / "d.csv").write_text("a,label\n" + "".join(f"{i},{i % 2}\n" for i in range(40)))
    assert main(["run", "--data-root", str(data), "--output-dir", str(tmp_path / "o")]) == 1
    out, err = capfd.readouterr()
    assert err == ""
    assert "tfx-accum run: error: RuntimeError: Tuner failed" in out
    assert "not a square number of features (the real cause)" in out
    log = next((tmp_path / "o" / "logs").glob("run-*.log"))
    assert f"full log: {log}" in out
    assert "noise from a library" in log.read_text()


def test_beam_arguments_follow_the_input_size_and_the_pod():
    from tfx_accum.pipeline.beam_args import (
        BEAM_PLUGIN_ARG,
        local_beam_args,
        parse_beam_args,
        pod_beam_args,
    )
    from tfx_accum.pipeline.errors import InputError

    small, why = local_beam_args(300_000, cpus=8)
    assert small == ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    assert "MiB" in why
    big, _ = local_beam_args(2 * 2**30, cpus=8)
    assert big == [
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=8",
        BEAM_PLUGIN_ARG,
    ]
    medium, _ = local_beam_args(200 * 2**20, cpus=8)
    assert medium[1] == "--direct_num_workers=2"
    # A narrow table: small in bytes, but the Evaluator's and StatisticsGen's cost is per row.
    narrow, _ = local_beam_args(44 * 2**20, cpus=4, rows=2_000_000)
    assert narrow[:2] == ["--direct_running_mode=multi_processing", "--direct_num_workers=4"]
    assert local_beam_args(44 * 2**20, cpus=8, rows=2_000_000)[0][1] == "--direct_num_workers=4"
    assert local_beam_args(4 * 2**20, cpus=8, rows=150_000)[0] == small
    # On two CPUs in-process, whatever the input (bench.beam_sizing; test_beam_sizing.py).
    assert local_beam_args(2 * 2**30, cpus=2, rows=2_000_000)[0] == small
    assert pod_beam_args(2.0) == small
    assert pod_beam_args(4.0) == [
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=4",
        BEAM_PLUGIN_ARG,
    ]
    assert parse_beam_args("--runner=DataflowRunner --project='my p'") == [
        "--runner=DataflowRunner",
        "--project=my p",
    ]
    with pytest.raises(InputError, match="Beam options"):
        parse_beam_args("DataflowRunner")


def test_no_tune_hyperparameters_reach_the_trainer_config():
    from tfx_accum.pipeline.pipeline import create_pipeline

    pipeline = create_pipeline(
        "p",
        "/tmp/root",
        "/tmp/data",
        "/tmp/serving",
        tune=False,
        hyperparameters=Hyperparameters(accumulation_steps=2, micro_batch_size=8),
    )
    trainer = next(c for c in pipeline.components if c.id == "Trainer")
    config = trainer.exec_properties["custom_config"]
    assert '"accumulation_steps": 2' in config and '"micro_batch_size": 8' in config


def test_train_steps_do_not_invalidate_the_tuners_cache():
    """The Tuner's execution properties (its cache key) do not depend on --train-steps."""
    from tfx_accum.pipeline.pipeline import create_pipeline

    def tuner_properties(train_steps):
        pipeline = create_pipeline("p", "/r", "/d", "/s", tune=True, train_steps=train_steps)
        tuner = next(c for c in pipeline.components if c.id == "Tuner")
        return {k: str(v) for k, v in tuner.exec_properties.items()}

    assert tuner_properties(100) == tuner_properties(5000)


# A command whose libraries leave temporary files the way TensorFlow's AutoGraph does (a
# file deleted by an atexit handler, which the command's os._exit skips) and the way Beam's
# workers and the search's workers could (a child process's file).
LEAVES_TEMPORARY_FILES = """
import atexit, os, subprocess, sys, tempfile
from tfx_accum.pipeline.cli import parser as cli

def main(argv):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write("pass")
    atexit.register(os.remove, handle.name)
    tempfile.mkdtemp(prefix="beam-temp")
    subprocess.run([sys.executable, "-c", "import tempfile; tempfile.mkstemp()"], check=True)
    return 3

cli.main = main
cli.entry([])
"""


def test_a_command_leaves_nothing_in_the_temporary_directory(tmp_path):
    user_tmp = tmp_path / "tmp"
    user_tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", LEAVES_TEMPORARY_FILES],
        env={**os.environ, "TMPDIR": str(user_tmp)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr  # the command's own exit code, unchanged
    assert sorted(p.name for p in user_tmp.iterdir()) == []


def test_a_command_runs_where_its_temporary_directory_cannot_be_made(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with command_temp_dir() as path:
        assert path == str(tmp_path / "missing")


# --- output directories that would lose or mix up files: exit 2, nothing written ---


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "d.csv").write_text("a,label\n" + "".join(f"{i},{i % 2}\n" for i in range(40)))
    return data


def _refused(capfd, args: list[str], message: str) -> None:
    assert main(["run", *args]) == 2
    out, err = capfd.readouterr()
    assert message in out + err, out + err
    assert len([line for line in (out + err).splitlines() if "error" in line]) == 1


def test_an_output_dir_inside_the_data_root_is_refused(tmp_path, capfd):
    data = _data(tmp_path)
    before = sorted(p.name for p in data.rglob("*"))
    for out in (data, data / "out"):
        _refused(
            capfd,
            ["--data-root", str(data), "--output-dir", str(out)],
            f"--output-dir {str(out)!r} is inside --data-root",
        )
    assert sorted(p.name for p in data.rglob("*")) == before  # nothing written


def test_a_path_with_a_newline_is_refused(tmp_path, capfd):
    data = _data(tmp_path)
    out = tmp_path / "out\nput"
    _refused(
        capfd,
        ["--data-root", str(data), "--output-dir", str(out)],
        "holds the control character '\\n'",
    )
    assert not out.exists()


def test_someone_elses_directory_is_refused_unless_forced(tmp_path, capfd, monkeypatch):
    from tfx_accum.pipeline.local import runner as local_runner

    data, out = _data(tmp_path), tmp_path / "mine"
    (out / "serving_model").mkdir(parents=True)  # an empty mount point loses nothing
    from tfx_accum.pipeline.checks.output_dir import check

    check(out.resolve(), str(data))
    (out / "trials.csv").write_text("my own results\n")
    _refused(
        capfd,
        ["--data-root", str(data), "--output-dir", str(out)],
        "holds files (trials.csv, ...) but is no tfx-accum output",
    )
    assert (out / "trials.csv").read_text() == "my own results\n"
    assert sorted(p.name for p in out.iterdir()) == ["serving_model", "trials.csv"]

    # --force: the run goes on (stopped here, where the pipeline would start).
    def stop(**kwargs):
        raise RuntimeError("stopped before the pipeline")

    monkeypatch.setattr(local_runner, "run_local", stop)
    assert main(["run", "--data-root", str(data), "--output-dir", str(out), "--force"]) == 1
    assert "stopped before the pipeline" in capfd.readouterr().out
    # Now a tfx-accum output (its lock): the next run needs no --force.
    assert (out / ".tfx-accum.lock").exists()
    assert main(["run", "--data-root", str(data), "--output-dir", str(out)]) == 1
