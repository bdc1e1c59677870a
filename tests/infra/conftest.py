"""Make the helpers in this directory importable as ``provisioned``.

pytest's default import mode already puts this directory on sys.path; the
explicit insert keeps ``import provisioned`` working under
``--import-mode=importlib`` as well.
"""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
