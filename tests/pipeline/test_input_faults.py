"""Hostile input and a shared output directory, before any component runs.

- The input check never raises a traceback (bytes that are not UTF-8, a NUL byte, a field
  over the CSV parser's limit, a directory named like a data file) and reads exactly the
  files ExampleGen reads (checked against TensorFlow's and Beam's own matching).
- Planted symbolic and hard links in the output directory are refused or never written
  through; the log is created fresh.
- The library adds nothing to ``sys.path``; the command line adds the current directory
  for a model module only when the module is there, and says so.
"""

from __future__ import annotations

import gzip
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from tfx_accum import console
from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.pipeline.checks.csv_check import validate_csv_dir
from tfx_accum.pipeline.checks.data import DataError, validate_data_root
from tfx_accum.pipeline.checks.tfrecord_check import validate_tfrecord_dir
from tfx_accum.pipeline.cli.parser import main
from tfx_accum.pipeline.errors import InputError

GOOD_ROWS = 40


def _csv_root(tmp_path: Path, body: bytes, name: str = "data.csv") -> Path:
    root = tmp_path / "data"
    root.mkdir()
    rows = b"".join(b"%d,%d,%d\n" % (i, 2 * i, i % 2) for i in range(GOOD_ROWS))
    (root / name).write_bytes(b"a,b,label\n" + rows + body)  # enough rows to train on
    return root


def _run_main(root: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    code = main(["run", "--data-root", str(root), "--output-dir", str(tmp_path / "out")])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "body, expected",
    [
        (b"5,caf\xe9,1\n", f"line {GOOD_ROWS + 2}: bytes that are not UTF-8 (b'\\xe9,1\\n')"),
        (b"5,6\x00,1\n", f"line {GOOD_ROWS + 2}: a NUL byte"),
        (b'5,"' + b"x" * 200_000 + b'",1\n', "a field longer than 131,072 characters"),
        (b'5,"unclosed,1\n' + b"7,8,0\n" * 30_000, "a field longer than 131,072 characters"),
    ],
    ids=["latin-1", "nul", "long-field", "unclosed-quote"],
)
def test_what_the_csv_parser_cannot_read_is_a_one_line_error(body, expected, tmp_path, capsys):
    root = _csv_root(tmp_path, body)
    code, err = _run_main(root, tmp_path, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tfx-accum run: error: "), err
    assert f"{root / 'data.csv'}, " in err and expected in err, err


def test_a_directory_named_like_a_csv_file_is_a_one_line_error(tmp_path, capsys):
    root = _csv_root(tmp_path, b"")
    (root / "more.csv").mkdir()  # tf.io.gfile.glob returns it: CsvExampleGen fails on it
    code, err = _run_main(root, tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1
    assert f"{root / 'more.csv'} matches *.csv but is not a file" in err


def _examples(count: int) -> list[bytes]:
    records = []
    for i in range(count):
        feature = {
            "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2])),
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        records.append(example.SerializeToString())
    return records


def _write_records(path: Path, records: list[bytes]) -> None:
    options = "GZIP" if path.name.lower().endswith(".gz") else None
    with tf.io.TFRecordWriter(str(path), options=options) as writer:
        for record in records:
            writer.write(record)


def test_a_backup_file_beside_the_records_is_read_as_import_example_gen_reads_it(tmp_path):
    root = tmp_path / "records"
    root.mkdir()
    _write_records(root / "data.tfrecord", _examples(20))
    (root / "data.tfrecord.bak").write_bytes(os.urandom(4096))  # ImportExampleGen reads it
    with pytest.raises(DataError, match=r"data\.tfrecord\.bak is not a readable TFRecord file"):
        validate_data_root(str(root), ModelSettings())


def test_the_tfrecord_check_reads_the_files_beam_matches(tmp_path):
    from apache_beam.io.filesystems import FileSystems

    root = tmp_path / "records"
    root.mkdir()
    for name in ("a.tfrecord", "b.tfrecords.gz", ".c.tfrecord", "d.tfrecord.1", "E.TFRECORD"):
        _write_records(root / name, _examples(10))
    (root / "sub.tfrecord").mkdir()
    _write_records(root / "sub.tfrecord" / "inner.tfrecord", _examples(10))
    summary = validate_tfrecord_dir(str(root), "label")  # the files, before the label rules
    (matched,) = FileSystems.match([f"{root}/*.tfrecord*"])
    assert sorted(summary.files) == sorted(m.path for m in matched.metadata_list)
    assert summary.rows == 10 * len(matched.metadata_list)


def test_the_csv_check_reads_the_files_csv_example_gen_globs(tmp_path):
    root = _csv_root(tmp_path, b"")
    for name in (".hidden.csv", "upper.CSV", "old.csv.bak"):
        (root / name).write_bytes(b"a,b,label\n5,6,1\n")
    summary = validate_csv_dir(str(root), "label")  # the files, before the label rules
    assert sorted(summary.files) == sorted(tf.io.gfile.glob(f"{root}/*.csv"))
    assert summary.rows == GOOD_ROWS + 1  # data.csv's rows and .hidden.csv's one


def test_a_gzipped_csv_named_tfrecord_is_not_taken_for_records(tmp_path):
    root = tmp_path / "records"
    root.mkdir()
    with gzip.open(root / "data.tfrecord.gz", "wb") as handle:
        handle.write(b"not records at all" * 100)
    with pytest.raises(DataError, match="data.tfrecord.gz is not a readable TFRecord file"):
        validate_data_root(str(root), ModelSettings())


# ------------------------------------------------------------ planted links, a shared directory


def test_a_lock_file_planted_as_a_symlink_is_never_written_through(tmp_path):
    from tfx_accum.pipeline.checks.output_dir import LOCK_NAME, claim

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"), claim(out):
        pass
    assert victim.read_text() == "precious\n"


def test_a_lock_file_planted_as_a_hard_link_is_never_written_into(tmp_path):
    from tfx_accum.pipeline.checks.output_dir import LOCK_NAME, claim

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / LOCK_NAME)
    with pytest.raises(InputError, match="2 hard links"), claim(out):
        pass
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("name", [".tfx-accum.lock", "logs"])
def test_a_planted_symlink_in_the_output_directory_is_a_one_line_error(name, tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    # Checked first: before the data (which does not exist here) and before any write.
    missing = str(tmp_path / "no-data")
    assert main(["run", "--output-dir", str(out), "--no-tune", "--data-root", missing]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{str(out / name)!r} is a symbolic link" in err, err
    assert list(victim.iterdir()) == []


def test_the_log_is_created_fresh_beside_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    planted = logs / "run-1.log"
    planted.symlink_to(victim)
    previous = os.umask(0)
    try:
        with console.capture(planted) as captured:
            console.say("a line")
            print("a library's line")
    finally:
        os.umask(previous)
    assert victim.read_text() == "precious\n"
    assert captured.path == logs / "run-1-1.log"
    info = captured.path.lstat()
    assert stat.S_ISREG(info.st_mode) and not info.st_mode & stat.S_IWOTH
    assert captured.path.read_text() == "a line\na library's line\n"


# ------------------------------------------------------------------------- no implicit sys.path

MODEL_MODULE = """
import keras


def wide_mlp(features, num_classes, hp):
    inputs = {name: keras.Input((1,), name=name) for name in features}
    x = keras.layers.Concatenate()(list(inputs.values()))
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
"""


def test_the_library_does_not_import_from_the_current_directory(tmp_path, monkeypatch):
    from tfx_accum.components.models.model_function import ModelFunctionError, load_function

    (tmp_path / "planted_models.py").write_text(MODEL_MODULE)
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    with pytest.raises(ModelFunctionError, match="cannot import 'planted_models'"):
        load_function("planted_models:wide_mlp")
    assert sys.path == before


@pytest.mark.e2e
def test_the_command_adds_the_current_directory_for_a_model_module_and_says_so(tmp_path):
    """README's ``tfx-accum run --model my_models:wide_mlp`` with my_models.py in the cwd,
    run by the installed ``tfx-accum`` script (whose own directory is on sys.path, not the
    cwd): the module is found, with a line saying where."""
    (tmp_path / "my_models.py").write_text(MODEL_MODULE)
    script = Path(sys.executable).parent / "tfx-accum"
    proc = subprocess.Popen(
        [str(script), "run", "--model", "my_models:wide_mlp", "--no-tune"]
        + ["--output-dir", str(tmp_path / "out"), "--data-root", str(_csv_root(tmp_path, b""))]
        + ["--accumulation-steps", "1", "--micro-batch-size", "1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[tfx-accum] log:"):  # the model was built and checked
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    expected = (
        f"[data] --model my_models:wide_mlp: 'my_models' is in the current directory "
        f"{tmp_path}, which is added to the module search path (PYTHONPATH) for this run\n"
    )
    assert expected in lines, "".join(lines)
    assert lines[-1].startswith("[tfx-accum] log:"), "".join(lines)
