import os

# MuJoCo reads its GL backend at import: headless EGL on machines without a display.
os.environ.setdefault("MUJOCO_GL", "egl")
