"""Log store tests: pure Python, no Ray or ZooKeeper fixtures.

The project runs pytest with ``--import-mode=importlib``, which puts no test folder on
``sys.path``; this folder is appended so its tests can share ``logstore_helpers``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)
