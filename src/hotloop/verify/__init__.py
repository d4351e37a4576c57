"""`hotloop verify CKPT`: a checkpoint's reference run (docs/verify.md) through hotloop's implementation,
compared output by output and stage by stage; with `--artifact`, a compiled or compressed plan too."""
