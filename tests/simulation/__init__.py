"""Deterministic simulation of the runtime (ADR 0029): see docs/testing.md, "Simulation"."""
