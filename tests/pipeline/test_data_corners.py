"""The data's quiet corners: what ExampleGen would read otherwise than the user meant,
refused before any component runs with one line naming the file and the line or record (exit
code 2), or read as the user asks.

- a column of numbers with a stray token (``N/A``, ``-``): refused, or read as missing with
  ``--missing-values``, or as text with ``--categorical`` (tfx_accum.pipeline.checks.stray_tokens's
  rule: a text column stays text);
- a header line repeated inside a CSV (``cat part-*.csv``);
- ``--data-root`` with glob characters (``data[1]`` beside ``data1``);
- TFRecords with several values in a feature, int64 and float in one feature, inf;
- a path component over 255 bytes, or a path too long for what the run writes below it;
- ``--exclude-features`` naming a column empty in every row: accepted.

The command is run in-process with the pipeline itself replaced: a check that let the data
through would start it, which the tests see (``Started``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.pipeline.checks.data import validate_data_root
from tfx_accum.pipeline.cli.parser import main
from tfx_accum.pipeline.local import runner

ROWS = 60


class Started(BaseException):
    """The pipeline was about to run: the checks let the data through."""


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    """``tfx-accum run --data-root ROOT OPTIONS`` -> (exit code, stderr); the pipeline's
    start raises ``Started`` with its settings."""

    def started(**settings):
        raise Started(settings)

    monkeypatch.setattr(runner, "run_local", started)

    def run(root: Path, *options: str, output: Path | None = None) -> tuple[int, str]:
        out = output or tmp_path / "out"
        code = main(["run", "--data-root", str(root), "--output-dir", str(out), *options])
        return code, capsys.readouterr().err

    return run


def _one_line(code: int, err: str) -> str:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("tfx-accum run: error: "), err
    return err


def _table(root: Path, header: str, rows: list[str], name: str = "d.csv") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text("\n".join([header, *rows]) + "\n")
    return root


def _numbers(count: int = ROWS) -> list[str]:
    """Rows ``a,b,label`` of numbers (b: fractional)."""
    rng = np.random.default_rng(0)
    return [f"{i},{rng.normal():.3f},{i % 2}" for i in range(count)]


# ---------------------------------------------------------------- numbers with stray tokens


@pytest.mark.parametrize("token", ["N/A", "-", "?", "unknown"])
def test_a_stray_token_in_a_column_of_numbers_is_refused_naming_file_line_and_token(
    token, cli, tmp_path
):
    rows = _numbers()
    rows[7] = f"7,{token},1"  # line 9: the header is line 1
    root = _table(tmp_path / "data", "a,b,label", rows)
    err = _one_line(*cli(root))
    assert f"{root / 'd.csv'}, line 9, column 'b': {token!r} in a column of numbers" in err
    assert "(59 of its 60 values are numbers)" in err and "--missing-values=" in err


def test_missing_value_markers_in_most_cells_are_still_refused(cli, tmp_path):
    # A sparse column of numbers: NA in 40 of 60 cells is a marker, not a category.
    rows = [f"{i},{'NA' if i % 3 else i * 0.5},{i % 2}" for i in range(ROWS)]
    err = _one_line(*cli(_table(tmp_path / "data", "a,b,label", rows)))
    assert "line 3, column 'b': 'NA' in a column of numbers (20 of its 60" in err


def test_a_text_column_with_some_numbers_stays_text(tmp_path):
    # Most cells text: a text column, as CsvExampleGen reads it (the rule's other side).
    words = ["red", "blue", "green", "12", "7"]
    rows = [f"{i},{words[i % 5]},{i % 2}" for i in range(ROWS)]
    summary = validate_data_root(str(_table(tmp_path, "a,b,label", rows)), ModelSettings())
    assert dict(summary.kinds)["b"] == "string"


def test_a_stray_token_in_the_label_is_refused(cli, tmp_path):
    rows = _numbers()
    rows[20] = "20,0.5,N/A"
    err = _one_line(*cli(_table(tmp_path / "data", "a,b,label", rows)))
    assert "line 22, column 'label': 'N/A' in a column of numbers" in err
    assert "every row needs a label" in err


@pytest.mark.parametrize("text_column", [False, True], ids=["numbers", "with-a-text-column"])
def test_missing_values_reads_the_tokens_as_missing_in_the_check_and_the_run(
    text_column, cli, tmp_path
):
    rows = [r + (",x" if text_column else "") for r in _numbers()]
    rows[3] = "3,N/A,1" + (",y" if text_column else "")
    rows[5] = "5,-,1" + (",y" if text_column else "")
    header = "a,b,label" + (",t" if text_column else "")
    root = _table(tmp_path / "data", header, rows)
    with pytest.raises(Started) as started:
        cli(root, "--missing-values", "N/A,-")
    settings = started.value.args[0]
    checked = settings["checked"]
    assert dict(checked.kinds)["b"] == "numeric"
    assert dict(checked.missing)["b"] == 2
    assert settings["missing_values"] == ("N/A", "-")  # on to create_pipeline's ExampleGen


def test_categorical_reads_a_column_of_numbers_with_text_as_categories(cli, tmp_path):
    grades = ["K", *map(str, range(1, 13))]
    rows = [f"{i},{grades[i % 13]},{i % 2}" for i in range(ROWS)]
    root = _table(tmp_path / "data", "a,grade,label", rows)
    assert "'K' in a column of numbers" in _one_line(*cli(root))
    with pytest.raises(Started) as started:
        cli(root, "--categorical", "grade")
    assert dict(started.value.args[0]["checked"].kinds)["grade"] == "string"


def test_a_schema_typing_the_column_bytes_reads_it_as_text(cli, tmp_path):
    grades = ["K", *map(str, range(1, 13))]
    rows = [f"{i},{grades[i % 13]},{i % 2}" for i in range(ROWS)]
    root = _table(tmp_path / "data", "a,grade,label", rows)
    schema = tmp_path / "schema.pbtxt"
    schema.write_text(
        "".join(
            f'feature {{ name: "{name}" type: {kind} }}\n'
            for name, kind in (("a", "INT"), ("grade", "BYTES"), ("label", "INT"))
        )
    )
    with pytest.raises(Started) as started:
        cli(root, "--schema", str(schema))
    assert dict(started.value.args[0]["checked"].kinds)["grade"] == "string"


def test_a_stray_token_in_a_column_left_out_is_not_refused(cli, tmp_path):
    rows = _numbers()
    rows[7] = "7,N/A,1"
    with pytest.raises(Started):
        cli(_table(tmp_path / "data", "a,b,label", rows), "--exclude-features", "b")


def test_example_gen_reads_the_missing_values_as_empty_cells(tmp_path):
    from tfx_accum.components.data import csv_examples
    from tfx_accum.components.data.missing_values import configured_missing_values
    from tfx_accum.pipeline.pipeline import example_gen_component

    rows = _numbers(6)
    rows[2] = "2,N/A,0"
    path = _table(tmp_path, "a,b,label", rows) / "d.csv"

    def column_b(missing_values):
        records = [r for chunk in csv_examples.examples([str(path)], missing_values) for r in chunk]
        return [tf.train.Example.FromString(r).features.feature["b"] for r in records]

    assert column_b(())[0].WhichOneof("kind") == "bytes_list"  # without: text, as TFX reads it
    read = column_b(("N/A",))
    assert [f.WhichOneof("kind") for f in read] == ["float_list"] * 6
    assert list(read[2].float_list.value) == [] and len(read[0].float_list.value) == 1
    component = example_gen_component(str(tmp_path), "csv", ("N/A", "-"))
    properties = component.exec_properties
    assert configured_missing_values(properties) == ("N/A", "-")
    assert configured_missing_values(example_gen_component("x", "csv").exec_properties) == ()


# ---------------------------------------------------------------- a repeated header line


@pytest.mark.parametrize("text", [False, True], ids=["numbers", "with-a-text-column"])
def test_a_header_line_repeated_inside_a_csv_is_named(text, cli, tmp_path):
    header = "a,b,label" + (",t" if text else "")
    rows = [r + (",x" if text else "") for r in _numbers()]
    part = "\n".join([header, *rows[:30]]) + "\n"
    root = tmp_path / "data"
    root.mkdir()
    (root / "all.csv").write_text(part + "\n".join([header, *rows[30:]]) + "\n")  # cat parts
    err = _one_line(*cli(root))
    assert f"{root / 'all.csv'}, line 32 repeats the header line" in err


# ---------------------------------------------------------------- --data-root read literally


def test_a_data_root_with_glob_characters_is_refused_not_read_as_a_pattern(cli, tmp_path):
    from apache_beam.io.filesystems import FileSystems

    literal = _table(tmp_path / "data[1]", "a,b,label", _numbers())
    sibling = _table(tmp_path / "data1", "a,b,label", [r + "0" for r in _numbers()])
    # What ExampleGen would read: TensorFlow's glob and Beam's match take the sibling's files.
    assert tf.io.gfile.glob(f"{literal}/*.csv") == [str(sibling / "d.csv")]
    (matched,) = FileSystems.match([f"{literal}/*.csv"])
    assert [m.path for m in matched.metadata_list] == [str(sibling / "d.csv")]
    err = _one_line(*cli(literal))
    assert f"--data-root {str(literal)!r}" in err and "holds '['" in err


@pytest.mark.parametrize("character", ["*", "?", "["])
def test_an_output_directory_with_glob_characters_is_refused(character, cli, tmp_path):
    root = _table(tmp_path / "data", "a,b,label", _numbers())
    err = _one_line(*cli(root, output=tmp_path / f"out{character}1"))
    assert "--output-dir" in err and f"holds {character!r}" in err


# ---------------------------------------------------------------- TFRecords


def _feature(values) -> tf.train.Feature:
    if isinstance(values, tf.train.Feature):
        return values
    if all(isinstance(v, int) for v in values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def _records(root: Path, special: dict[int, dict], count: int = 40) -> Path:
    """``count`` records {x: float, label: int}; ``special``: record index (from 1) ->
    features replaced there."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "data.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for number in range(1, count + 1):
            features = {"x": [float(number)], "label": [number % 2], **special.get(number, {})}
            feature = {name: _feature(values) for name, values in features.items()}
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    return root


@pytest.mark.parametrize("name", ["x", "label"])
def test_a_feature_or_label_with_several_values_is_refused_naming_the_record(name, cli, tmp_path):
    values = [1.0, 2.0] if name == "x" else [0, 1]
    root = _records(tmp_path / "records", {12: {name: values}})
    err = _one_line(*cli(root))
    assert f"{root / 'data.tfrecord'}, record 12, feature {name!r}: 2 values" in err


@pytest.mark.parametrize(
    "later",
    [[7], tf.train.Feature(int64_list=tf.train.Int64List(value=[]))],
    ids=["int64", "empty-int64"],
)
def test_int64_and_float_in_one_feature_is_refused_naming_both_records(later, cli, tmp_path):
    root = _records(tmp_path / "records", {9: {"x": later}})
    err = _one_line(*cli(root))
    path = root / "data.tfrecord"
    assert f"{path}, record 9, feature 'x': int64 values, while {path}, record 1 holds float" in err


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
def test_a_number_that_is_not_finite_in_records_is_refused(value, cli, tmp_path):
    root = _records(tmp_path / "records", {5: {"x": [float(value)]}})
    err = _one_line(*cli(root))
    assert f"{root / 'data.tfrecord'}, record 5, feature 'x': " in err and "not a finite" in err


# ---------------------------------------------------------------- path lengths


@pytest.mark.parametrize("option", ["--output-dir", "--data-root"])
def test_a_name_over_255_bytes_is_refused_in_one_line(option, cli, tmp_path):
    root = _table(tmp_path / "data", "a,b,label", _numbers())
    long = tmp_path / ("é" * 130)  # 260 bytes
    if option == "--output-dir":
        err = _one_line(*cli(root, output=long / "out"))
    else:
        err = _one_line(*cli(long / "data"))
    assert option in err and "260 bytes long, over the file system's limit of 255" in err


def test_an_output_directory_too_long_for_the_paths_a_run_writes_is_refused(cli, tmp_path):
    root = _table(tmp_path / "data", "a,b,label", _numbers())
    deep = Path(tmp_path, *["d" * 200] * ((4096 - len(str(tmp_path))) // 201 - 1))
    assert 3800 < len(str(deep)) < 4096 - 20  # itself a usable path
    err = _one_line(*cli(root, output=deep))
    assert "--output-dir" in err and "over the system's limit of 4,096 bytes" in err
    assert not deep.exists()


# ---------------------------------------------------------------- an empty column left out


def test_an_empty_column_left_out_is_accepted_and_refused_when_read(cli, tmp_path):
    rows = [r + "," for r in _numbers()]  # column e: empty in every row
    root = _table(tmp_path / "data", "a,b,label,e", rows)
    err = _one_line(*cli(root))
    assert "Column 'e' is empty in every row: leave it out with --exclude-features e" in err
    with pytest.raises(Started):
        cli(root, "--exclude-features", "e")
    with pytest.raises(Started):
        cli(root, "--features", "a,b")


# ---------------------------------------------------------------- held: read as ExampleGen reads

HELD = {
    "CRLF line ends": ("a,b,label\r\n", "\r\n", None),
    "a quoted text cell over two lines": ("a,t,label\n", "\n", None),
    "unicode column names": ("größe,b,label\n", "\n", None),
    "semicolons": ("a;b;label\n", "\n", "has no label column 'label'"),
}


@pytest.mark.parametrize("name", sorted(HELD))
def test_held_csv_forms_are_read_as_example_gen_reads_them(name, cli, tmp_path):
    from tfx_accum.components.data import csv_examples

    header, end, refused = HELD[name]
    cells = [r.split(",") for r in _numbers()]
    if "quoted" in name:
        cells = [[a, '"two\nlines"' if int(a) % 2 else "one", label] for a, _, label in cells]
    separator = ";" if name == "semicolons" else ","
    root = tmp_path / "data"
    root.mkdir()
    (root / "d.csv").write_bytes(
        (header + end.join(separator.join(c) for c in cells) + end).encode()
    )
    if refused:
        assert refused in _one_line(*cli(root))
        return
    with pytest.raises(Started) as started:
        cli(root)
    checked = started.value.args[0]["checked"]
    written = [r for chunk in csv_examples.examples([str(root / "d.csv")]) for r in chunk]
    assert checked.rows == len(written) == ROWS


def test_files_with_columns_in_another_order_are_refused(cli, tmp_path):
    root = _table(tmp_path / "data", "a,b,label", _numbers())
    _table(root, "b,a,label", _numbers(), name="e.csv")
    assert "e.csv has the columns of" in _one_line(*cli(root))


@pytest.mark.parametrize("name", ["data.tfrecord", "data.tfrecord.gz"])
def test_a_tfrecord_file_cut_short_is_refused_naming_it(name, cli, tmp_path):
    root = _records(tmp_path / "records", {})
    data = (root / "data.tfrecord").read_bytes()
    (root / "data.tfrecord").unlink()
    if name.endswith(".gz"):
        import gzip

        data = gzip.compress(data)
    (root / name).write_bytes(data[: len(data) // 2 + 5])  # inside a record
    assert f"{root / name} is not a readable TFRecord file" in _one_line(*cli(root))
