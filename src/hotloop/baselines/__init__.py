"""Every measurement a baseline: `hotloop history` and `hotloop compare` over the results of bench and eval.

The statistics are in `hotloop.measure.compare`, the bench comparison in `hotloop.measure.baseline`, the
eval comparison in `hotloop.closedloop.baseline`, the store in `hotloop.measure.history`; this package
holds only the commands that read them back (it sits at the top, beside the CLI and the demo).
"""
