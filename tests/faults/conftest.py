import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "checkpoint"))  # ckpt_helpers: small deterministic configs
sys.path.insert(0, str(Path(__file__).parents[1] / "data"))  # data_fixtures: small market tables
