"""Training of the shipped demo policies, one loop shared by every demo policy (`loop`)."""
