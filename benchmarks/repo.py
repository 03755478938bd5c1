"""Where the repository is: the benches are not installed, so a `python -m benchmarks.…` child runs from here.

Its own module, not the package's `__init__`: the skeleton's workflows import the package inside
Temporal's sandbox, which forbids resolving paths at import.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
