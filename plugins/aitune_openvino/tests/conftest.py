"""The tests' shared models and helpers (``openvino_helpers``) are importable: importlib mode adds no test folders."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
