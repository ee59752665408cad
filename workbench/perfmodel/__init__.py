"""Analytical performance models: pure functions of measured inputs (the profile, the collectives, every paradigm's step time, Stanza's allocation)."""
