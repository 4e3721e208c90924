"""Token ids (advcli.io.tokens): a null id or one beyond int64 is one line naming its row and
token."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import groups_of_four, refused, write_jsonl


@pytest.mark.parametrize("command", ["annotate", "shard"])
def test_a_null_or_out_of_range_token_id_names_its_row_and_token(tmp_path, command):
    rows = groups_of_four()
    rows[3]["input_ids"] = [rows[3]["input_ids"][0], None, *rows[3]["input_ids"][2:]]
    path = write_jsonl(tmp_path / "null.jsonl", rows)
    line = refused(tmp_path, path, command)
    assert line.startswith(f"advcli: error: {path}: line 4, column 'input_ids': token id null")
    assert "at token 1" in line
    table = pa.Table.from_pylist(groups_of_four())
    ids = [[1, 2**63 + 5, *r[2:]] for r in table.column("input_ids").to_pylist()]
    at = table.schema.get_field_index("input_ids")
    wide = table.set_column(at, "input_ids", pa.array(ids, pa.list_(pa.uint64())))
    big = tmp_path / "u64.parquet"
    pq.write_table(wide, big)
    line = refused(tmp_path, str(big), command)
    assert "row 0, column 'input_ids': token id 9223372036854775813 is beyond int64" in line
