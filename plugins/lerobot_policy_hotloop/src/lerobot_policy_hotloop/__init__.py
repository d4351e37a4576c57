"""hotloop as a LeRobot policy plugin (skeleton; see issue 33)."""
