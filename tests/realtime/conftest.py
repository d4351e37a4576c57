import sys
from pathlib import Path

# The fakes are imported by module name.
sys.path.insert(0, str(Path(__file__).parent))
