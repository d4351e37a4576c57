"""pi's own compression capabilities: structured pruning, distillation recovery, step distillation, QAT."""
