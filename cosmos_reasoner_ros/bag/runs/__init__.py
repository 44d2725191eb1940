"""Whole runs: scenario files and their sweeps (scenario), runs over bags, scenarios and recorded results
(suite), and the end of a run: records, frames, verdict, report (finish)."""

__all__ = ["finish", "scenario", "suite"]
