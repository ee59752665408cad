"""Analytical performance models: pure functions of measured inputs (Stanza allocation, compression utility)."""
