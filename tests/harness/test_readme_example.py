"""The README's Python example, run as a user runs it: a fresh interpreter, the embedded default
(its own ZooKeeper and local Ray), produce, consume with a group, shut down, nothing left."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.support.processes import kill_marked, left_behind, run_marked

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README.md has no ```python example"
    return blocks[0]


@pytest.mark.slow
def test_the_readme_example_runs_in_a_plain_python_shell(tmp_path: Path) -> None:
    example = _python_example()
    assert "Cluster.start(brokers=3)" in example
    script = tmp_path / "example.py"
    script.write_text(example)
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(README.parent)
    run = None
    try:
        run = run_marked([sys.executable, str(script)], env,
                         tmp_path / "output.txt", timeout_s=300)
        left = left_behind(run.marker)
    finally:
        if run is not None:
            kill_marked(run.marker)
    output = (tmp_path / "output.txt").read_text(errors="replace")
    assert run.returncode == 0, output[-4000:]
    # Ray forwards its workers' log lines to the same output: pick out the example's own.
    lines = [line for line in output.splitlines()
             if line.startswith(("RecordMetadata(", "[ConsumerRecord("))]
    assert len(lines) == 2, output[-3000:]
    # send(...).result(): the record's metadata; poll(): the very record, read back.
    assert re.fullmatch(r"RecordMetadata\(topic='orders', partition=\d, offset=0, "
                        r"timestamp=\d+\)", lines[0]), lines
    assert "value=b'hello'" in lines[1] and "key=b'k'" in lines[1], lines
    assert any("raylet" in command for command in run.seen.values()), "it started its own Ray"
    assert left == {}, f"the example left processes behind: {left}"
