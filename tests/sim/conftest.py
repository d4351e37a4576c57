import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
# Worker processes import the fake policies by module name.
sys.path.insert(0, str(Path(__file__).parent))
