"""`hotloop demo`: the acceleration ladder in one report (`report`), one module per rung."""
