"""`cosmos-reasoner-server`: builds the `vllm serve` command a given vLLM release accepts and supervises it.

settings.py (config/server.yaml), versions.py (what each vLLM release accepts, derived from its wheel),
detect.py (which vLLM the executable runs), command.py (argv and environment), supervisor.py (the process
group), cli.py (the command line), errors.py (failures and exit codes).
"""
