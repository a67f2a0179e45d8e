"""pytest-xdist's scheduling by group, as the test command runs it (`--dist loadgroup`).

Like `--dist loadfile` (each module's tests to one worker, so module-scoped clusters start once),
except that the modules of one named group go to a single worker together. pytest-xdist's own
`xdist_group` marks would do this, but pytest-xdist 3.8 names the group by rewriting a test's
node id, which pytest 9 no longer allows; so the grouping is done where pytest-xdist schedules.
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling


class ModuleGroupScheduling(LoadScopeScheduling):
    """Schedule by module, with the modules in `grouped` (paths under tests/) as one unit."""

    GROUP = "grouped"

    def __init__(self, config: pytest.Config, log: Any, grouped: frozenset[str]) -> None:
        super().__init__(config, log)
        self.grouped = grouped

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return self.GROUP if module.removeprefix("tests/") in self.grouped else module
