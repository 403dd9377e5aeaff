"""Reads the execution archive's Parquet files with DuckDB (not our code) and runs the example
queries of docs/athena.md on them, as the test command's independent reader.

Usage: archive_duckdb.py ARCHIVE_DIR DOC.md
Prints one JSON object: {"describe": [[column, type], ...], "queries": [[row, ...], ...]}, the
queries' rows as lists of strings, in the order the document gives them.
"""

import json
import re
import sys

import duckdb


def main() -> None:
    archive, doc = sys.argv[1], sys.argv[2]
    queries = re.findall(r"```sql\n(.*?)```", open(doc, encoding="utf-8").read(), re.S)
    db = duckdb.connect()
    db.execute("SET TimeZone = 'UTC'")
    files = f"{archive}/executions/*/*/*.parquet".replace("'", "''")
    db.execute(f"CREATE VIEW executions AS SELECT * FROM read_parquet('{files}', hive_partitioning = true, "
               "hive_types = {'tenant': 'VARCHAR', 'date': 'VARCHAR'})")
    describe = [[row[0], row[1]] for row in db.execute("DESCRIBE executions").fetchall()]
    answers = [[[str(v) for v in row] for row in db.execute(q).fetchall()] for q in queries]
    print(json.dumps({"describe": describe, "queries": answers}))


if __name__ == "__main__":
    main()
