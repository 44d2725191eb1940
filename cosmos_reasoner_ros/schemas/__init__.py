"""The task schemas and the grammars vLLM compiles from them, below everything else: what a structured-output
request asks of vLLM and the backends' limits (structured_output, with grammar_probe, the script it runs in a
backend's Python), whether a compiled grammar holds its schema (grammar_fidelity, with the samples it asks a
grammar to accept and refuse: schema_samples, and their oracle: schema_validation). Shared by reasoner/ and
server/; imports only errors and package_files."""

__all__ = ["grammar_fidelity", "grammar_probe", "schema_samples", "schema_validation", "structured_output"]
