"""Bad input: exit code 2, one line naming the file, the row and the column; nothing written."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from neuscale_opt.errors import InputError
from neuscale_opt.traces.loaders import load_trace_file

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = "2023-11-16 18:17:0{}.0000000,{},{}\n"


def azure(rows: list[tuple[int, str, str]]) -> str:
    return HEADER + "".join(ROW.format(*r) for r in rows)


# (name, file bytes, expected fragments of the one-line message besides the file name)
CASES: list[tuple[str, bytes, list[str]]] = [
    ("empty.csv", b"", ["empty file"]),
    ("header_only.csv", HEADER.encode(), ["row 0", "no data rows"]),
    (
        "misnamed.csv",
        b"TIMESTAMP,ContextToken,GeneratedTokens\n2023-11-16 18:17:03.0,1,2\n",
        ["row 0 (header)", "'ContextTokens'", "missing"],
    ),
    ("text_token.csv", azure([(1, "5", "1"), (2, "7", "2"), (3, "abc", "3")]).encode(), ["row 3", "'ContextTokens'"]),
    ("negative.csv", azure([(1, "5", "1"), (2, "7", "-2")]).encode(), ["row 2", "'GeneratedTokens'", "negative"]),
    ("nan.csv", azure([(1, "5", "1"), (2, "", "2")]).encode(), ["row 2", "'ContextTokens'", "missing"]),
    ("nan_word.csv", azure([(1, "NaN", "1")]).encode(), ["row 1", "'ContextTokens'"]),
    ("fraction.csv", azure([(1, "5", "1"), (2, "7.5", "2")]).encode(), ["row 2", "'ContextTokens'", "integer"]),
    (
        "bad_time.csv",
        (HEADER + "2023-11-16 18:17:01.0,5,1\nyesterday,5,1\n").encode(),
        ["row 2", "'TIMESTAMP'", "unparseable"],
    ),
    ("fake.csv.gz", azure([(1, "5", "1")]).encode(), ["row 0", "not gzip"]),
    ("truncated.csv.gz", gzip.compress(azure([(1, "5", "1")] * 50).encode())[:40], ["row 0", "gzip"]),
    (
        "ragged.csv",
        (HEADER + "2023-11-16 18:17:01.0,5,1\n2023-11-16 18:17:02.0,5,1,9\n").encode(),
        ["row 2", "malformed CSV", "line 3"],
    ),
    (
        "mooncake_bad.jsonl",
        b'{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 3, "input_length": 5,\n',
        ["row 2", "not valid JSON"],
    ),
    (
        "mooncake_ms.csv",
        b"timestamp_ms,input_length,output_length\n0,5,1\nlater,5,1\n",
        ["row 2", "'timestamp_ms'", "unparseable"],
    ),
    (
        "rates.csv",
        b"model,window_start_s,window_s,total_rate_rps\nm,0,600,1.5\nm,600,600,-3\n",
        ["row 2", "'total_rate_rps'", ">= 0"],
    ),
]


@pytest.mark.parametrize(("name", "content", "fragments"), CASES, ids=[c[0] for c in CASES])
def test_bad_file_exits_2_with_one_located_line(
    tmp_path: Path, run_cli: Callable, name: str, content: bytes, fragments: list[str]
) -> None:
    trace = tmp_path / name
    trace.write_bytes(content)
    out_csv, out_json = tmp_path / "fc.csv", tmp_path / "fc.json"
    code, out, err = run_cli("forecast", trace, "--method", "last-peak", "--csv", out_csv, "--json", out_json)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("neuscale-opt: error: ")
    assert str(trace) in lines[0]
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])
    assert "Traceback" not in err
    assert not out_csv.exists() and not out_json.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left behind


def test_trace_stats_same_refusal(tmp_path: Path, run_cli: Callable) -> None:
    trace = tmp_path / "neg.csv"
    trace.write_text(azure([(1, "-5", "1")]))
    code, _, err = run_cli("trace-stats", trace, "--json")
    assert code == 2 and "row 1, column 'ContextTokens': negative token count -5" in err


def test_unknown_header_lists_the_formats(tmp_path: Path) -> None:
    trace = tmp_path / "x.csv"
    trace.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(InputError, match=r"row 0 \(header\).*cannot detect the trace format") as info:
        load_trace_file(trace)
    assert info.value.where == str(trace)


def test_explicit_format_names_the_missing_column(tmp_path: Path) -> None:
    trace = tmp_path / "m.csv"
    trace.write_text("timestamp_ms,input_length,output_len\n0,1,2\n")
    with pytest.raises(InputError, match=r"row 0 \(header\), column 'output_length': missing"):
        load_trace_file(trace, format="mooncake")


def test_unsorted_rows_are_repaired_with_a_warning(tmp_path: Path, run_cli: Callable) -> None:
    trace = tmp_path / "unsorted.csv"
    trace.write_text(azure([(3, "5", "1"), (1, "6", "2"), (2, "7", "3")]))
    with pytest.warns(UserWarning, match=r"row 2, column 'TIMESTAMP': rows not sorted"):
        code, out, _ = run_cli("trace-stats", trace, "--json")
    assert code == 0 and '"rows": 3' in out and "rows not sorted" in out


def test_bad_method_parameter_exits_2(tmp_path: Path, run_cli: Callable) -> None:
    trace = tmp_path / "ok.csv"
    trace.write_text(azure([(1, "5", "1"), (2, "6", "2")]))
    code, _, err = run_cli("forecast", trace, "--method", "ewma", "--alpha", "1.5")
    assert code == 2 and "alpha must be in (0, 1]" in err
    code, _, err = run_cli("forecast", trace, "--method", "ewma", "--q", "0.5")
    assert code == 2 and "method 'ewma' takes ['alpha'], not ['q']" in err


def test_missing_file_exits_2(tmp_path: Path, run_cli: Callable) -> None:
    code, _, err = run_cli("trace-stats", tmp_path / "nope.csv")
    assert code == 2 and "nope.csv: no such file" in err
