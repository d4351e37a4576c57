"""Reference PyTorch models (one file per family). Import submodules directly; nothing heavy loads here."""
